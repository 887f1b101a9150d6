"""Bring your own model: foreign ONNX files described in the configuration.

Loaded and read by the runner (real onnxruntime sessions; decoding checked against
hand-computed cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.byom_models import (
    channel_embedder,
    sklearn_csv_classifier,
    sklearn_isolation_forest,
    ssd_detector,
    torch_colour_classifier,
    yolo_v8_detector,
)

from cdml_edge.config.model_section import ModelConfig
from cdml_edge.model.detect import decode_yolo, nms
from cdml_edge.model.prepare import image_geometry
from cdml_edge.model.runner import InferenceError, ModelOverrides, ModelRunner

SSD_OUTPUT = {
    "kind": "detector",
    "format": "ssd",
    "boxes": "detection_boxes",
    "scores": "detection_scores",
    "classes": "detection_classes",
    "box_order": "yxyx",
    "normalized": True,
}


def _load(path: Path, name: str = "m", **desc: Any) -> ModelRunner:
    mc = ModelConfig(path=path, **desc)
    return ModelRunner.load(path, ModelOverrides.from_config(mc, name))


def _solid(rgb: tuple[int, int, int], h: int, w: int) -> np.ndarray:
    img = np.zeros((h, w, 3), np.uint8)
    img[:, :] = rgb
    return img


def test_torch_export_with_nhwc_uint8_input_and_its_own_input_name(tmp_path: Path) -> None:
    r = _load(
        torch_colour_classifier(tmp_path / "colour.onnx"),
        "colour",
        modality="image",
        labels=["red", "green", "blue"],
        output={"kind": "classifier", "top_k": 2},
    )
    inp = r.spec.input
    assert (r.spec.input_name, inp.layout, inp.dtype, inp.shape()) == (
        "pixels",
        "NHWC",
        "uint8",
        [32, 32, 3],
    )  # all from the graph
    x = r.prepare(_solid((10, 20, 200), 48, 64))
    assert x.dtype == np.uint8 and x.shape == (32, 32, 3) and int(x[0, 0, 2]) == 200
    [pred] = r.run(x[None])
    assert pred.label == "blue" and pred.top_k is not None
    assert [k for k, _ in pred.top_k] == ["blue", "green"]
    # logits (0.39, 0.78, 7.84) / softmax: the probability of blue, by hand
    z = np.array([10, 20, 200]) / 255 * 10
    assert pred.score == pytest.approx(np.exp(z[2]) / np.exp(z).sum(), rel=1e-5)


def test_a_bgr_model_sees_the_channels_swapped(tmp_path: Path) -> None:
    r = _load(
        torch_colour_classifier(tmp_path / "colour.onnx"),
        modality="image",
        labels=["red", "green", "blue"],
        input={"channel_order": "BGR"},
        output={"kind": "classifier"},
    )
    [pred] = r.run(r.prepare(_solid((200, 0, 0), 32, 32))[None])
    assert pred.label == "blue"  # red pixels land in the model's third channel


def test_yolo_v8_letterbox_nms_and_source_coordinates(tmp_path: Path) -> None:
    r = _load(
        yolo_v8_detector(tmp_path / "yolo.onnx"),
        "det",
        modality="image",
        labels=["person", "box"],
        input={"resize": "letterbox"},
        output={"kind": "detector", "score_threshold": 0.25, "iou_threshold": 0.5},
    )
    img = _solid((50, 50, 50), 64, 128)  # 128 wide, 64 high -> 64 x 32 in the 64 x 64 input
    g = image_geometry(r.spec.input, 64, 128)
    assert (g.sx, g.sy, g.px, g.py) == (0.5, 0.5, 0.0, 16.0)
    x = r.prepare(img)
    assert x.shape == (3, 64, 64)
    assert x[0, 0, 0] == pytest.approx(114 / 255) and x[0, 32, 32] == pytest.approx(50 / 255)
    [a, b] = r.run(np.stack([x, x]), [g, g])  # the export takes one image: run one by one
    assert a == b and a.detections is not None
    # box 1 (cx 32, cy 32, 16 x 16) -> input corners (24, 24, 40, 40) -> source
    # ((24 - 0) / 0.5, (24 - 16) / 0.5, ...) = (48, 16, 80, 48); box 2 is suppressed by
    # box 1 (same class, IoU 0.88), box 3 (other class) kept, box 4 under the threshold
    assert [(d.label, d.score, d.box) for d in a.detections] == [
        ("person", pytest.approx(0.9), (48.0, 16.0, 80.0, 48.0)),
        ("box", pytest.approx(0.7), (48.0, 16.0, 80.0, 48.0)),
    ]
    assert a.label == "person" and a.score == pytest.approx(0.9)


def test_yolo_v5_rows_multiply_objectness() -> None:
    rows = np.array(
        [[[50, 50, 20, 20, 0.5, 0.9, 0.1], [52, 50, 20, 20, 0.9, 0.8, 0.2]]], dtype=np.float32
    )
    raw = decode_yolo(rows, 2, 0.3, 0.5, 10)
    # scores 0.45 and 0.72; the second wins and suppresses the first
    assert raw.scores.tolist() == pytest.approx([0.72])
    assert raw.boxes.tolist() == [[42.0, 40.0, 62.0, 60.0]]


def test_nms_is_class_wise_and_keeps_separate_boxes() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 10], [20, 20, 30, 30]], float)
    keep = nms(boxes, np.array([0.9, 0.8, 0.7, 0.6]), np.array([0, 0, 1, 0]), 0.5)
    assert keep.tolist() == [0, 2, 3]


def test_ssd_triple_normalised_yxyx_boxes_stretched_back(tmp_path: Path) -> None:
    r = _load(
        ssd_detector(tmp_path / "ssd.onnx"),
        "ssd",
        modality="image",
        labels=["background", "bolt"],
        output=SSD_OUTPUT,
    )
    assert r.spec.input.layout == "NHWC" and r.spec.input.size == 100
    g = image_geometry(r.spec.input, 50, 200)  # 200 x 50 stretched to 100 x 100
    [pred] = r.run(r.prepare(_solid((0, 0, 0), 50, 200))[None], [g])
    # (ymin, xmin, ymax, xmax) = (0.1, 0.2, 0.5, 0.6) of 100 px -> x 20..60, y 10..50 ->
    # source x / 0.5, y / 2
    assert pred.detections is not None
    assert [(d.label, d.box) for d in pred.detections] == [("bolt", (40.0, 5.0, 120.0, 25.0))]


def test_sklearn_classifier_on_csv_rows(tmp_path: Path) -> None:
    r = _load(
        sklearn_csv_classifier(tmp_path / "clf.onnx"),
        "clf",
        modality="csv",
        labels=["cold", "hot"],
        input={"columns": ["temp", "vib"]},
        output={"kind": "classifier", "name": "probabilities"},
    )
    assert r.spec.input.shape() == [2] and r.spec.input_name == "X"
    rows = [np.array([[t, 0.5]], np.float32) for t in (90.0, 5.0)]
    preds = r.run(np.stack([r.prepare(a) for a in rows]))
    assert [p.label for p in preds] == ["hot", "cold"]
    assert all(p.score is not None and p.score > 0.9 for p in preds)  # probabilities as given


def test_sklearn_isolation_forest_lower_is_anomalous(tmp_path: Path) -> None:
    r = _load(
        sklearn_isolation_forest(tmp_path / "iso.onnx"),
        "iso",
        modality="csv",
        input={"columns": ["temp", "vib"]},
        anomaly_threshold=0.0,
        output={"kind": "anomaly", "name": "scores", "anomaly_when": "below"},
    )
    normal, odd = r.run(
        np.stack(
            [
                r.prepare(np.array([[20.0, 0.5]], np.float32)),
                r.prepare(np.array([[95.0, 4.0]], np.float32)),
            ]
        )
    )
    assert (normal.label, odd.label) == ("normal", "anomaly")
    assert odd.anomaly and odd.anomaly_score is not None and odd.anomaly_score < 0


def test_embedding_head_fits_prototypes_in_numpy(tmp_path: Path) -> None:
    r = _load(
        channel_embedder(tmp_path / "emb.onnx"),
        "emb",
        modality="image",
        output={"kind": "embedding", "examples": {"a": tmp_path, "b": tmp_path}},
    )
    head = r.head
    vec = {"red": np.array([[1.0, 0, 0], [0.9, 0, 0]]), "blue": np.array([[0, 0, 1.0]])}
    head.fit(vec, 100.0)  # type: ignore[attr-defined]
    x = np.stack([r.prepare(_solid((255, 0, 0), 16, 16)), r.prepare(_solid((0, 255, 0), 16, 16))])
    red, green = r.run(x)
    assert (red.label, red.anomaly) == ("red", False)
    assert red.score == pytest.approx(0.05, abs=1e-6)  # distance to (0.95, 0, 0)
    assert green.anomaly and green.score == pytest.approx(np.sqrt(0.95**2 + 1), rel=1e-6)


@pytest.mark.parametrize(
    ("desc", "fragments"),
    [
        (
            {"input": {"size": 64, "layout": "NCHW", "dtype": "float32"}},
            [
                "the graph's 'pixels' is ?x32x32x3",
                "N x 3x64x64 NCHW",
                "input.dtype: the graph's 'pixels' is tensor(uint8), the description says float32",
            ],
        ),
        (
            {"input": {"name": "image"}},
            ["input.name 'image' is not an input of the graph (pixels)"],
        ),
        (
            {"output": {"kind": "classifier", "name": "probs"}},
            ["output: 'probs' not among the graph's outputs (scores)"],
        ),
        ({"labels": ["a", "b"]}, ["labels: 2 labels for the 3 classes of output 'scores'"]),
    ],
)
def test_a_description_that_does_not_fit_the_graph_says_what(
    tmp_path: Path, desc: dict[str, Any], fragments: list[str]
) -> None:
    path = torch_colour_classifier(tmp_path / "colour.onnx")
    base: dict[str, Any] = {
        "modality": "image",
        "labels": ["red", "green", "blue"],
        "output": {"kind": "classifier"},
    }
    with pytest.raises(InferenceError) as err:
        _load(path, **{**base, **desc})
    for fragment in fragments:
        assert fragment in str(err.value)


def test_a_model_without_metadata_or_description_is_told_how_to_describe_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(InferenceError, match="describe the model with models.<name>.output"):
        _load(channel_embedder(tmp_path / "emb.onnx"), modality="image")


def test_labels_and_size_alone_make_a_plain_classifier_run(tmp_path: Path) -> None:
    """The first complaint: labels and input_size in the config, then 'no cdml.spec'."""
    labels = tmp_path / "labels.txt"
    labels.write_text("red\ngreen\n\nblue\n")
    r = _load(
        torch_colour_classifier(tmp_path / "colour.onnx"),
        modality="image",
        labels_file=labels,
        input_size=32,
    )
    assert r.kind == "classifier" and r.spec.labels == ["red", "green", "blue"]
    assert r.run(r.prepare(_solid((0, 200, 0), 20, 20))[None])[0].label == "green"


def _mfcc_scorer(path: Path) -> Path:
    """An audio anomaly scorer with its own input name: ``mfcc`` (N, 13, 40) -> ``level`` (N, 1).

    The level is the mean absolute coefficient.
    """
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Abs", ["mfcc"], ["a"]),
        helper.make_node("ReduceMean", ["a"], ["level"], axes=[1, 2], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mfcc",
        [helper.make_tensor_value_info("mfcc", TensorProto.FLOAT, ["N", 13, 40])],
        [helper.make_tensor_value_info("level", TensorProto.FLOAT, ["N"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_audio_model_takes_the_mfccs_its_graph_says(tmp_path: Path) -> None:
    import io

    import soundfile as sf

    from cdml_edge.window.manifest import ManifestItem
    from cdml_edge.window.pieces import item_pieces

    r = _load(
        _mfcc_scorer(tmp_path / "mfcc.onnx"),
        "hum",
        modality="audio",
        input={"sample_rate": 8000},
        anomaly_threshold=1e9,
        output={"kind": "anomaly", "name": "level"},
    )
    inp = r.spec.input
    assert (inp.n_mfcc, inp.frames, inp.sample_rate) == (13, 40, 8000)  # type: ignore[union-attr]
    buf = io.BytesIO()
    t = np.arange(8000, dtype=np.float32) / 8000
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 300 * t), 8000, format="WAV")
    data = buf.getvalue()
    item = ManifestItem(
        id="a", member="a.wav", name="a.wav", size=len(data), mtime_ns=0, ts=0.0, sha256="0" * 64
    )
    [piece] = item_pieces(item, "audio", data, {"hum": r}, None)
    x = piece.inputs["hum"]
    assert x.shape == (13, 40)
    [pred] = r.run(x[None])
    assert pred.label == "normal" and pred.score == pytest.approx(float(np.abs(x).mean()), rel=1e-5)


def test_float16_input_is_fed_as_float16(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["logits"], axes=[2, 3], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT16, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (tmp_path / "half.onnx").write_bytes(model.SerializeToString())
    r = _load(
        tmp_path / "half.onnx",
        modality="image",
        labels=["r", "g", "b"],
        input={"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    )
    assert r.spec.input.dtype == "float16" and r.input_bytes == 3 * 8 * 8 * 2
    [pred] = r.run(r.prepare(_solid((0, 0, 255), 8, 8))[None])
    assert pred.label == "b" and r.kind == "classifier"  # logits (-2, -2, 2): (x - 0.5) / 0.25
    assert pred.score == pytest.approx(np.exp(2) / (np.exp(2) + 2 * np.exp(-2)), rel=1e-3)
