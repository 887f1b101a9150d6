#!/usr/bin/env python3
"""What a described (foreign) model costs beside one of ours, measured in the same run.

1. Preparing a 1280×720 frame for a 640×640 input: stretch (what our models do, the
   baseline) against letterbox and centre-crop.
2. Reading a YOLOv8n-sized output (84 × 8400 candidates: cx, cy, w, h, 80 class scores)
   into detections with numpy NMS, against the classifier head on 1000 logits (baseline).
3. A window of 16 JPEG frames (1280×720) scored by one detector against the same window
   scored by the detector and a classifier on the same source (one decode, two models).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from timing import median_time

from cdml_edge.archive import pack
from cdml_edge.config.model_section import ModelConfig, ModelInputConfig, ModelOutputConfig
from cdml_edge.model.heads import ClassifierHead, DetectorHead
from cdml_edge.model.inputs import ImageInput
from cdml_edge.model.prepare import prepare_item
from cdml_edge.model.runner import ModelOverrides, ModelRunner
from cdml_edge.model.spec import ModelSpec
from cdml_edge.window.manifest import ManifestItem, WindowManifest
from cdml_edge.window.score import score_window


def median_ms(fn: Callable[[], object], seconds: float) -> float:
    """Milliseconds: the median call over ``seconds`` (3 calls of warm-up)."""
    return median_time(fn, seconds, warmup=3, min_runs=10) * 1000.0


def _spec(resize: str) -> ModelSpec:
    inp = ImageInput(size=640, mean=[0, 0, 0], std=[1, 1, 1], resize=resize)  # type: ignore[arg-type]
    return ModelSpec(
        name="b", modality="image", task="detector", input=inp, labels=["a"], outputs=["o"]
    )


def bench_prepare(frame: np.ndarray, seconds: float) -> None:
    base = median_ms(lambda: prepare_item(_spec("stretch"), frame), seconds)
    print(f"prepare 1280x720 -> 640x640: stretch {base:.2f} ms (baseline)")
    for policy in ("letterbox", "center_crop"):
        ms = median_ms(lambda p=policy: prepare_item(_spec(p), frame), seconds)  # type: ignore[misc]
        print(f"  {policy:<11} {ms:.2f} ms  x{ms / base:.2f}")


def bench_heads(seconds: float) -> None:
    rng = np.random.default_rng(0)
    labels = [f"c{i}" for i in range(80)]
    out = np.zeros((1, 84, 8400), np.float32)
    out[0, :2] = rng.uniform(0, 640, (2, 8400))
    out[0, 2:4] = rng.uniform(10, 120, (2, 8400))
    out[0, 4:] = rng.uniform(0, 0.3, (80, 8400))  # ~17 % of candidates over 0.25
    det = DetectorHead(labels, "yolo", "o", score_threshold=0.25, iou_threshold=0.45)
    clf = ClassifierHead("o", [str(i) for i in range(1000)])
    logits = {"o": rng.standard_normal((1, 1000)).astype(np.float32)}
    base = median_ms(lambda: clf.interpret(logits, 1, []), seconds)
    ms = median_ms(lambda: det.interpret({"o": out}, 1, [None]), seconds)
    n = len(det.interpret({"o": out}, 1, [None])[0].detections or ())
    print(f"classifier head, 1000 logits: {base:.3f} ms (baseline)")
    print(f"  YOLOv8 84x8400 decode + NMS ({n} kept of 100 max): {ms:.2f} ms  x{ms / base:.0f}")


def _models(folder: Path) -> tuple[Path, Path]:
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    const = numpy_helper.from_array(np.zeros((1, 6, 100), np.float32), "c")
    yolo = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["images"], ["t"], keepdims=0),
            helper.make_node("Mul", ["t", "zero"], ["z"]),
            helper.make_node("Add", ["c", "z"], ["output0"]),
        ],
        "yolo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 640, 640])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 100])],
        initializer=[zero, const],
    )
    clf = helper.make_graph(
        [
            helper.make_node("Cast", ["pixels"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMean", ["f"], ["scores"], axes=[1, 2], keepdims=0),
        ],
        "clf",
        [helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 224, 224, 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3])],
    )
    paths = (folder / "yolo.onnx", folder / "clf.onnx")
    for graph, path in zip((yolo, clf), paths, strict=True):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.save(m, str(path))
    return paths


def _window(frame: np.ndarray, n: int) -> bytes:
    jpg = cv2.imencode(".jpg", frame)[1].tobytes()
    items = tuple(
        ManifestItem(
            id=f"i{i}",
            member=f"f{i}.jpg",
            name=f"f{i}.jpg",
            size=len(jpg),
            mtime_ns=0,
            ts=0.0,
            sha256="0" * 64,
        )
        for i in range(n)
    )
    manifest = WindowManifest(
        window_id="w",
        device="d",
        source="cam",
        modality="image",
        opened_at=0.0,
        closed_at=0.0,
        items=items,
    )
    return pack(
        [(it.member, jpg) for it in items],
        format="zip",
        level=0,
        manifest=manifest.model_dump(mode="json"),
    )


def bench_window(frame: np.ndarray, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        yolo, clf = _models(Path(tmp))
        det = ModelConfig(
            path=yolo,
            modality="image",
            labels=["a", "b"],
            input=ModelInputConfig(resize="letterbox"),
            output=ModelOutputConfig(kind="detector"),
        )
        cls = ModelConfig(
            path=clf,
            modality="image",
            labels=["r", "g", "b"],
            output=ModelOutputConfig(kind="classifier"),
        )
        runners = {
            k: ModelRunner.load(mc.path, ModelOverrides.from_config(mc, k))
            for k, mc in (("det", det), ("cls", cls))
        }
    archive = _window(frame, 16)
    one = median_ms(lambda: score_window(archive, runners, device="d", models=["det"]), seconds)
    two = median_ms(
        lambda: score_window(archive, runners, device="d", models=["det", "cls"]), seconds
    )
    print(f"window of 16 1280x720 JPEGs, detector only: {one:.1f} ms (baseline)")
    print(f"  detector + classifier on the same source: {two:.1f} ms  x{two / one:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="Time per measurement.")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8)
    frame = cv2.GaussianBlur(noise, (0, 0), 3)  # JPEG-like content, not noise
    bench_prepare(frame, args.seconds)
    bench_heads(args.seconds)
    bench_window(frame, args.seconds)


if __name__ == "__main__":
    main()
