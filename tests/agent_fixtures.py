"""Helpers for the agent tests: tiny real ONNX models, waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cdml_edge.model.spec import AudioInput, ImageInput, ModelSpec, SeriesInput


def wait_for(cond: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond`` until it holds; fail the test naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _save(graph: onnx.GraphProto, spec: ModelSpec, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for k, v in spec.to_metadata().items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def brightness_classifier(path: Path, size: int = 16) -> Path:
    """Image classifier: 'bright' when the mean pixel is above the image mid-grey, else 'dark'.

    input (N,3,H,W) (any size), normalised with mean=0.5/std=0.5 -> mean over pixels m in [-1, 1];
    logits = [-4m, 4m] over labels ['dark', 'bright'], latent = per-channel means (N,3).
    """
    spec = ModelSpec(
        name="brightness",
        version="1.0.0",
        modality="image",
        task="classifier",
        input=ImageInput(channels=3, size=size),
        labels=["dark", "bright"],
        latent_dim=3,
    )
    w = numpy_helper.from_array(
        np.array([[-4 / 3, 4 / 3]] * 3, dtype=np.float32), name="W"
    )
    nodes = [
        helper.make_node("GlobalAveragePool", ["input"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["latent"]),
        helper.make_node("MatMul", ["latent", "W"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "brightness",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 3]),
        ],
        initializer=[w],
    )
    return _save(graph, spec, path)


def level_anomaly(path: Path, channels: int = 3, window: int = 8, threshold: float = 1.0) -> Path:
    """Series anomaly model: anomaly = sum over channels of |mean over time|.

    An all-zero series scores 0; a series whose values average 1 in each of 3 channels
    scores 3 (anomalous against threshold 1).
    """
    spec = ModelSpec(
        name="level",
        version="1.0.0",
        modality="csv",
        task="anomaly",
        input=SeriesInput(channels=channels, window=window),
        anomaly_threshold=threshold,
        latent_dim=channels,
    )
    return _save(_level_graph("level", channels, window), spec, path)


def _level_graph(name: str, rows: int, cols: int) -> onnx.GraphProto:
    """anomaly = sum over rows of |mean over cols| of an (N, rows, cols) input; latent = means."""
    axes1 = numpy_helper.from_array(np.array([1], dtype=np.int64), name="axes1")
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["latent"], axes=[2], keepdims=0),
        helper.make_node("Abs", ["latent"], ["abs"]),
        helper.make_node("ReduceSum", ["abs", "axes1"], ["anomaly"], keepdims=0),
    ]
    return helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", rows, cols])],
        [
            helper.make_tensor_value_info("anomaly", TensorProto.FLOAT, ["N"]),
            helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", rows]),
        ],
        initializer=[axes1],
    )


def jpeg(value: int, size: int = 32) -> bytes:
    """A flat grey JPEG of the given 0..255 value."""
    import cv2

    img = np.full((size, size, 3), value, dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` the way a careful producer does: to ``.tmp``, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)


def mfcc_anomaly(path: Path, n_mfcc: int = 20, frames: int = 32, threshold: float = 1e9) -> Path:
    """Audio anomaly model on MFCCs: anomaly = sum over coefficients of |mean over frames|."""
    spec = ModelSpec(
        name="mfcc-level",
        version="1.0.0",
        modality="audio",
        task="anomaly",
        input=AudioInput(n_mfcc=n_mfcc, frames=frames),
        anomaly_threshold=threshold,
        latent_dim=n_mfcc,
    )
    return _save(_level_graph("mfcc_level", n_mfcc, frames), spec, path)


def cam_config(tmp_path: Path, extra: str, max_items: int = 2) -> Path:
    """``tmp_path/factory.yaml``: one image folder source ``cam1`` (``in/cam1``, created;
    windows of 100 ms / ``max_items``, ``on_done: delete``) scored by the brightness model,
    plus the ``extra`` YAML sections."""
    brightness_classifier(tmp_path / "brightness.onnx")
    (tmp_path / "in/cam1").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "factory.yaml"
    path.write_text(
        "device: {id: edge-1}\n"
        "sources:\n"
        "  - {name: cam1, kind: folder, path: in/cam1, modality: image, on_done: delete,\n"
        f"     window: {{seconds: 100ms, max_items: {max_items}}}, stable_seconds: 0.1}}\n"
        "models:\n"
        "  image: {path: brightness.onnx}\n" + extra
    )
    return path
