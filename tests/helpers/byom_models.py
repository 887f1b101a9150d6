"""Models no one here wrote the graph of, built the way their users build them.

A torch classifier exported with its own input name and NHWC uint8 pixels, a YOLO-style
detector and an SSD-style one, an embedding model, and scikit-learn models converted by
skl2onnx. None carries cdml metadata; the configuration describes each.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

COLOURS = ["red", "green", "blue"]


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def torch_colour_classifier(path: Path, size: int = 32) -> Path:
    """torch.onnx export: ``pixels`` (N, H, W, 3) uint8 RGB -> ``scores`` (N, 3) logits.

    The logits of red / green / blue: the mean of each channel, scaled.
    """
    import torch

    class Colour(torch.nn.Module):
        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            x = pixels.to(torch.float32) / 255.0
            return x.mean(dim=(1, 2)) * 10.0

    torch.onnx.export(
        Colour(),
        (torch.zeros(1, size, size, 3, dtype=torch.uint8),),
        str(path),
        input_names=["pixels"],
        output_names=["scores"],
        dynamic_axes={"pixels": {0: "n"}, "scores": {0: "n"}},
        opset_version=17,
        dynamo=False,
    )
    return path


def constant_output_graph(
    name: str, input_name: str, input_shape: list[int | str], outputs: dict[str, np.ndarray]
) -> onnx.GraphProto:
    """A graph whose outputs are fixed tensors (plus 0 x the input's sum, so they depend on it).

    Decoding can be checked against a hand-computed case.
    """
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceSum", [input_name], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")]
    outs = []
    for out_name, value in outputs.items():
        inits.append(numpy_helper.from_array(value.astype(np.float32), f"{out_name}_c"))
        nodes.append(helper.make_node("Add", [f"{out_name}_c", "nothing"], [out_name]))
        outs.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(value.shape)))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, input_shape)],
        outs,
        initializer=inits,
    )
    return graph


YOLO_BOXES = [  # cx, cy, w, h in input pixels, then one score per class (person, box)
    [32.0, 32.0, 16.0, 16.0, 0.9, 0.0],  # kept
    [33.0, 32.0, 16.0, 16.0, 0.8, 0.0],  # same class, IoU 0.88 with the first: suppressed
    [32.0, 32.0, 16.0, 16.0, 0.0, 0.7],  # same place, other class: kept
    [10.0, 10.0, 4.0, 4.0, 0.1, 0.05],  # below the score threshold
]


def yolo_v8_detector(path: Path, size: int = 64) -> Path:
    """YOLOv8-style ``output0`` (1, 4 + 2 classes, boxes) for a (1, 3, size, size) input."""
    out = np.array(YOLO_BOXES, dtype=np.float32).T[None]  # (1, 6, 4)
    return _save(
        constant_output_graph("yolo", "images", [1, 3, size, size], {"output0": out}), path
    )


def ssd_detector(path: Path, size: int = 100) -> Path:
    """SSD-style outputs for a (1, size, size, 3) input.

    Normalised ``ymin, xmin, ymax, xmax`` boxes, scores and class indices.
    """
    boxes = np.array([[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]]], dtype=np.float32)
    scores = np.array([[0.95, 0.2]], dtype=np.float32)
    classes = np.array([[1.0, 0.0]], dtype=np.float32)
    return _save(
        constant_output_graph(
            "ssd",
            "image_tensor",
            [1, size, size, 3],
            {"detection_boxes": boxes, "detection_scores": scores, "detection_classes": classes},
        ),
        path,
    )


def channel_embedder(path: Path) -> Path:
    """``x`` (N, 3, H, W) -> ``embedding`` (N, 3): the mean of each channel."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "embedder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 3])],
    )
    return _save(graph, path)


def sklearn_csv_classifier(path: Path) -> Path:
    """skl2onnx LogisticRegression on rows of (temp, vib): 'hot' when temp > 50."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(0, 100, 400), rng.uniform(0, 1, 400)]).astype(np.float32)
    y = np.where(x[:, 0] > 50, "hot", "cold")
    clf = LogisticRegression(max_iter=1000).fit(x, y)
    onx = to_onnx(clf, x[:1], options={id(clf): {"zipmap": False}}, target_opset=17)
    path.write_bytes(onx.SerializeToString())
    return path


def sklearn_isolation_forest(path: Path) -> Path:
    """skl2onnx IsolationForest on rows of (temp, vib) near (20, 0.5).

    Its ``scores`` output is lower for outliers.
    """
    from skl2onnx import to_onnx
    from sklearn.ensemble import IsolationForest

    rng = np.random.default_rng(1)
    x = np.column_stack([rng.normal(20, 1, 500), rng.normal(0.5, 0.05, 500)]).astype(np.float32)
    forest = IsolationForest(n_estimators=20, random_state=0).fit(x)
    onx = to_onnx(forest, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    path.write_bytes(onx.SerializeToString())
    return path


def image_png(path: Path, rgb: tuple[int, int, int], width: int, height: int) -> Path:
    """A solid-colour PNG (lossless: the colour is exact)."""
    import cv2

    img = np.zeros((height, width, 3), dtype=np.uint8)
    img[:, :] = rgb[::-1]  # OpenCV writes BGR
    ok, enc = cv2.imencode(".png", img)
    assert ok
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(enc.tobytes())
    return path
