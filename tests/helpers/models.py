"""Tiny real ONNX models with cdml metadata, built here.

An image classifier, a series and an audio anomaly model. onnx is imported when a model is
built, not when this is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from cdml_edge.model.spec import ModelSpec


def _save(graph: onnx.GraphProto, spec: ModelSpec, path: Path) -> Path:
    import onnx
    from onnx import helper

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
    from onnx import TensorProto, helper, numpy_helper

    from cdml_edge.model.spec import ImageInput, ModelSpec

    spec = ModelSpec(
        name="brightness",
        version="1.0.0",
        modality="image",
        task="classifier",
        input=ImageInput(channels=3, size=size),
        labels=["dark", "bright"],
        latent_dim=3,
    )
    w = numpy_helper.from_array(np.array([[-4 / 3, 4 / 3]] * 3, dtype=np.float32), name="W")
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
    from cdml_edge.model.spec import ModelSpec, SeriesInput

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
    from onnx import TensorProto, helper, numpy_helper

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


def mfcc_anomaly(path: Path, n_mfcc: int = 20, frames: int = 32, threshold: float = 1e9) -> Path:
    """Audio anomaly model on MFCCs: anomaly = sum over coefficients of |mean over frames|."""
    from cdml_edge.model.spec import AudioInput, ModelSpec

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


# -- the doctor's tiny models (opset 13, metadata set as model properties) ----------------


def image_classifier(path: Path) -> Path:
    """``tiny-digits``: (N, 1, 8, 8) grey images -> logits over a / b / c (random weights)."""
    from onnx import TensorProto, helper, numpy_helper

    from cdml_edge.model.spec import ImageInput, ModelSpec

    spec = ModelSpec(
        name="tiny-digits",
        modality="image",
        task="classifier",
        input=ImageInput(channels=1, size=8, mean=[0.5], std=[0.5]),
        labels=["a", "b", "c"],
    )
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Flatten", ["input"], ["latent"], axis=1),
        helper.make_node("MatMul", ["latent", "w"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 64]),
        ],
        [w],
    )
    return _save_opset13(graph, spec, path)


def series_anomaly(path: Path) -> Path:
    """``tiny-vibration``: (N, 2, 16) series -> anomaly = the mean of the values."""
    from onnx import TensorProto, helper

    from cdml_edge.model.spec import ModelSpec, SeriesInput

    spec = ModelSpec(
        name="tiny-vibration",
        modality="timeseries",
        task="anomaly",
        input=SeriesInput(channels=2, window=16),
        anomaly_threshold=1.0,
    )
    nodes = [
        helper.make_node("Flatten", ["input"], ["latent"], axis=1),
        helper.make_node("ReduceMean", ["latent"], ["anomaly"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-anomaly",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2, 16])],
        [
            helper.make_tensor_value_info("anomaly", TensorProto.FLOAT, ["N"]),
            helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 32]),
        ],
    )
    return _save_opset13(graph, spec, path)


def _save_opset13(graph: onnx.GraphProto, spec: ModelSpec, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, spec.to_metadata())
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
