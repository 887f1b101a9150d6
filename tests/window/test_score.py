"""The pure window step: real archives (ZIP and tar.zst), real decoders, real ONNX models."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier, level_anomaly

from cdml_edge.archive import open_archive
from cdml_edge.model.runner import ModelOverrides, ModelRunner
from cdml_edge.window.items import Item, Window
from cdml_edge.window.manifest import WindowManifest
from cdml_edge.window.pack import build_manifest, member_names, pack_window
from cdml_edge.window.payloads import ItemResult, WindowResult, item_id
from cdml_edge.window.score import score_window
from cdml_edge.window.topics import Sequencer


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelRunner]:
    d = tmp_path_factory.mktemp("models")
    out = {
        "image": ModelRunner.load(brightness_classifier(d / "b.onnx")),
        "csv": ModelRunner.load(level_anomaly(d / "l.onnx")),
    }
    for r in out.values():
        r.warm_up()
    return out


def _window(source: str, modality: str, named: list[tuple[str, bytes]]) -> Window:
    now = time.time()
    w = Window(f"{source}-w", source, now - 0.05)
    for n, (name, data) in enumerate(named):
        w.items.append(
            Item(
                source,
                name,
                modality,
                now - 0.01,
                data,
                item_id(source, name, len(data), n),
                size=len(data),
                mtime_ns=n,
            )
        )
    w.closed_ts = now
    return w


def _csv(rows: np.ndarray) -> bytes:
    lines = ["ax,ay,az"] + [",".join(f"{v:.3f}" for v in r) for r in rows]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_images_are_classified_through_the_archive(
    runners: dict[str, ModelRunner], fmt: str
) -> None:
    w = _window("cam", "image", [("a.jpg", jpeg(15)), ("b.jpg", jpeg(240)), ("c.jpg", jpeg(30))])
    packed = pack_window(w, device="dev", modality="image", archive_format=fmt)
    arc = open_archive(packed.archive)
    assert sorted(arc.names()) == ["a.jpg", "b.jpg", "c.jpg", "manifest.json"]
    out = score_window(packed.archive, runners, device="dev", archive_name=packed.name)
    assert [(r.item, r.label) for r in out.results] == [
        ("a.jpg", "dark"),
        ("b.jpg", "bright"),
        ("c.jpg", "dark"),
    ]
    assert all(r.score is not None and r.score > 0.9 for r in out.results)
    assert [r.id for r in out.results] == [it.item_id for it in w.items]
    assert [r.seq for r in out.results] == [1, 2, 3]
    assert out.results[0].model == "brightness" and out.results[0].model_version == "1.0.0"
    assert out.window.items == 3 and out.window.errors == 0
    assert out.window.counts == {"dark": 2, "bright": 1}
    assert out.window.archive is not None and out.window.archive.format == fmt
    assert out.window.archive.bytes == len(packed.archive)
    assert out.manifest.results[w.items[1].item_id].label == "bright"
    # the messages are the payload models, valid JSON, on the per-source topics
    msgs = out.messages()
    assert [m.topic for m in msgs] == ["cam/result"] * 3 + ["cam/window"]
    ItemResult.model_validate_json(msgs[0].payload)
    WindowResult.model_validate_json(msgs[-1].payload)
    assert "results" not in json.loads(msgs[-1].payload)  # item mode: the window as before


def test_window_mode_embeds_each_item_result_as_published_alone(
    runners: dict[str, ModelRunner],
) -> None:
    """``mqtt.results: window``: one message, its ``results`` the item messages' payloads."""
    w = _window("cam", "image", [("a.jpg", jpeg(15)), ("b.jpg", jpeg(240)), ("c.jpg", jpeg(30))])
    packed = pack_window(w, device="dev", modality="image")
    out = score_window(packed.archive, runners, device="dev", archive_name=packed.name)
    alone = out.messages("item")
    (msg,) = out.messages("window")
    assert msg.topic == "cam/window" and not msg.retain and msg.qos is None
    doc = json.loads(msg.payload)
    assert doc["results"] == [json.loads(m.payload) for m in alone[:-1]]
    assert [r["item"] for r in doc["results"]] == ["a.jpg", "b.jpg", "c.jpg"]
    assert [r["seq"] for r in doc["results"]] == [1, 2, 3]  # the result topic's numbering
    assert {k: v for k, v in doc.items() if k != "results"} == json.loads(alone[-1].payload)
    assert WindowResult.model_validate_json(msg.payload).results == out.results
    assert out.window.results is None  # the outcome itself is left as it was


def test_bad_inputs_fail_alone(runners: dict[str, ModelRunner]) -> None:
    good = jpeg(240)
    w = _window(
        "cam",
        "image",
        [
            ("ok.jpg", good),
            ("cut.jpg", good[: len(good) // 2]),
            ("junk.jpg", b"not an image at all"),
        ],
    )
    packed = pack_window(w, device="dev", modality="image")
    out = score_window(packed.archive, runners, device="dev")
    assert [r.item for r in out.results] == ["ok.jpg"]
    assert {f.item.name: f.error_type for f in out.failures} == {
        "cut.jpg": "DecodeError",
        "junk.jpg": "DecodeError",
    }
    assert "truncated" in next(f.message for f in out.failures if f.item.name == "cut.jpg")
    assert out.window.errors == 2 and out.window.counts["error"] == 2
    assert out.manifest.results[w.items[1].item_id].error == "DecodeError"


def test_csv_anomaly_per_file_and_per_segment(runners: dict[str, ModelRunner]) -> None:
    quiet = _csv(np.zeros((16, 3)))
    loud = _csv(np.vstack([np.zeros((8, 3)), np.ones((8, 3)) * 2]))
    w = _window(
        "vib", "csv", [("quiet.csv", quiet), ("loud.csv", loud), ("bad.csv", b"ax,ay\n1,2\n3\n")]
    )
    packed = pack_window(w, device="dev", modality="csv")
    per_file = score_window(packed.archive, runners, device="dev")
    assert [(r.item, r.anomaly) for r in per_file.results] == [
        ("quiet.csv", False),
        ("loud.csv", True),
    ]
    loud_r = per_file.results[1]
    assert loud_r.label == "anomaly" and loud_r.anomaly_score == pytest.approx(3.0, abs=1e-3)
    assert [f.item.name for f in per_file.failures] == ["bad.csv"]

    seg = score_window(packed.archive, runners, device="dev", segment_rows=8)
    assert [(r.item, r.anomaly) for r in seg.results] == [
        ("quiet.csv#rows=0-7", False),
        ("quiet.csv#rows=8-15", False),
        ("loud.csv#rows=0-7", False),
        ("loud.csv#rows=8-15", True),
    ]
    assert seg.results[3].anomaly_score == pytest.approx(6.0, abs=1e-3)
    assert len({r.id for r in seg.results}) == 4
    # the manifest keeps the most anomalous segment per file
    assert seg.manifest.results[w.items[1].item_id].anomaly is True


def test_an_item_its_model_gives_no_finite_score_is_a_failure_not_normal(
    runners: dict[str, ModelRunner],
) -> None:
    """Values beyond float32 (1e309 reads as inf) made a score NaN: published as normal."""
    w = _window(
        "vib",
        "csv",
        [
            ("ok.csv", _csv(np.zeros((16, 3)))),
            ("inf.csv", ("ax,ay,az\n" + "1e309,0,1\n" * 16).encode()),
            ("big.csv", ("ax,ay,az\n" + "1e30,0,1\n" * 16).encode()),  # finite: scored
        ],
    )
    packed = pack_window(w, device="dev", modality="csv")
    out = score_window(packed.archive, runners, device="dev")
    assert [(r.item, r.label) for r in out.results] == [
        ("ok.csv", "normal"),
        ("big.csv", "anomaly"),
    ]
    assert [(f.item.name, f.error_type) for f in out.failures] == [("inf.csv", "NonFiniteScore")]
    assert "model level gave a score that is not finite" in out.failures[0].message
    assert out.window.errors == 1 and out.window.counts.get("normal") == 1
    assert out.manifest.results[w.items[1].item_id].error == "NonFiniteScore"


def test_modalities_without_a_model_are_validated(runners: dict[str, ModelRunner]) -> None:
    w = _window("logs", "json", [("a.json", b'{"t": 1}'), ("b.json", b"{broken")])
    out = score_window(pack_window(w, device="d", modality="json").archive, runners, device="d")
    assert [(r.item, r.model, r.label) for r in out.results] == [("a.json", "none", None)]
    assert [f.item.name for f in out.failures] == ["b.json"]


def test_audio_that_is_not_audio_is_a_failure(runners: dict[str, ModelRunner]) -> None:
    from cdml_edge.synth import machine_audio

    clip = machine_audio(1, seed=0)[0]
    w = _window("mic", "audio", [("motor.wav", clip), ("noise.wav", b"RIFF....WAVEfmt garbage")])
    out = score_window(pack_window(w, device="d", modality="audio").archive, runners, device="d")
    assert [f.item.name for f in out.failures] == ["noise.wav"]
    assert [(r.item, r.model) for r in out.results] == [("motor.wav", "none")]


def test_replay_scores_the_same_bytes_the_same_way(runners: dict[str, ModelRunner]) -> None:
    w = _window("cam", "image", [("a.jpg", jpeg(15)), ("b.jpg", jpeg(240))])
    packed = pack_window(w, device="dev", modality="image", archive_format="tar.zst")
    live = score_window(packed.archive, runners, device="dev", sequencer=Sequencer())
    again = score_window(packed.archive, runners, device="dev", sequencer=Sequencer())
    strip = {"latency_ms", "seq"}
    assert [r.model_dump(exclude=strip) for r in live.results] == [
        r.model_dump(exclude=strip) for r in again.results
    ]
    assert live.window.archive == again.window.archive


def test_manifest_member_names_are_safe_and_unique() -> None:
    assert member_names(["a.jpg", "sub/a.jpg", "a.jpg", "manifest.json"]) == [
        "a.jpg",
        "sub/a.jpg",
        "a.1.jpg",
        "manifest.1.json",
    ]
    w = _window("cam", "image", [("x.jpg", b"1")])
    m = build_manifest(w, device="d", modality="image")
    assert WindowManifest.from_bytes(m.to_bytes()) == m
    doc = json.loads(m.to_bytes())
    assert doc["items"][0]["id"] == w.items[0].item_id


def test_config_overrides_replace_model_metadata(tmp_path: Path) -> None:
    path = brightness_classifier(tmp_path / "b.onnx")
    r = ModelRunner.load(path, ModelOverrides(labels=["night", "day"], input_size=8))
    assert r.spec.labels == ["night", "day"] and r.spec.input.shape() == [3, 8, 8]
    preds = r.run(np.stack([r.prepare(np.full((20, 20, 3), 250, np.uint8))]))
    assert preds[0].label == "day"


def test_missing_model_error_names_the_path_once(tmp_path: Path) -> None:
    from cdml_edge.model.runner import InferenceError

    missing = tmp_path / "x.onnx"
    with pytest.raises(InferenceError) as err:
        ModelRunner.load(missing)
    msg = str(err.value)
    assert msg.startswith(str(missing)) and "model file not found" in msg
    assert msg.count(str(missing)) == 1, msg


def test_a_series_with_no_steps_is_refused_as_an_empty_csv_is() -> None:
    """An empty .npy was padded with zeros to the model's window and scored."""
    import io as _io

    from cdml_edge.decode import DecodeError
    from cdml_edge.window.inputs import MODEL_INPUTS

    decode = MODEL_INPUTS["timeseries"].decode
    for empty in (np.zeros((0, 3), np.float32), np.zeros((0,), np.float32)):
        buf = _io.BytesIO()
        np.save(buf, empty)
        with pytest.raises(DecodeError, match="no steps"):
            decode(buf.getvalue(), "z.npy", None)
    buf = _io.BytesIO()
    np.save(buf, np.zeros((3, 0), np.float32))
    with pytest.raises(DecodeError, match="no channels"):
        decode(buf.getvalue(), "z.npy", None)


def test_a_nan_among_the_top_k_or_a_detection_is_not_finite_either(
    runners: dict[str, ModelRunner],
) -> None:
    """A declared-probabilities classifier with one NaN output gave a finite label and score."""
    from cdml_edge.model.detect import Detection
    from cdml_edge.model.heads import Prediction
    from cdml_edge.window.manifest import ManifestItem
    from cdml_edge.window.pieces import Piece
    from cdml_edge.window.score import drop_unscored

    def piece(n: int) -> Piece:
        item = ManifestItem(
            id=f"i{n}", member=f"m{n}", name=f"f{n}.jpg", size=1, mtime_ns=0, ts=0.0, sha256=""
        )
        return Piece(item, "image", "", {"image": np.zeros(1)})

    nan = float("nan")
    preds = {
        0: {"image": Prediction("b", 0.7, False, None, top_k=(("b", 0.7), ("a", nan)))},
        1: {"image": Prediction("b", 0.7, False, None, top_k=(("b", 0.7), ("a", 0.3)))},
        2: {
            "image": Prediction(
                "b", 0.7, False, None, detections=(Detection("b", nan, (0.0, 0.0, 1.0, 1.0)),)
            )
        },
    }
    kept, kept_preds, failed = drop_unscored([piece(0), piece(1), piece(2)], preds, runners)
    assert [p.item.id for p in kept] == ["i1"] and list(kept_preds) == [0]
    assert [f.item.id for f in failed] == ["i0", "i2"]
