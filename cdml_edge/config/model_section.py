"""``models.<name>`` of ``factory.yaml``: an ONNX file and maybe a description (schema only).

The description, for a model without our metadata, is of its input and outputs.

A model exported by cdml-edge carries its description in the ``.onnx`` metadata; any other
model (torchvision, timm, Ultralytics, skl2onnx, ...) is described here. Where both exist the
configuration wins, key by key. The key of a model is its name in results; a key that is a
modality (``image``, ``csv``, ...) also says the model's modality.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from cdml_edge.modality import SourceModality

OutputKind = Literal["classifier", "anomaly", "embedding", "detector"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _resolve(value: Path | None, info: ValidationInfo) -> Path | None:
    if value is None:
        return None
    value = Path(os.path.expanduser(str(value)))
    base = (info.context or {}).get("base_dir") if info.context else None
    return Path(base) / value if base is not None and not value.is_absolute() else value


class ModelInputConfig(_Section):
    """What the model's input tensor wants.

    Unset keys come from the graph (name, dtype, size, layout when the shape says it) or the
    model's metadata.
    """

    name: str | None = Field(
        default=None, description="Input tensor name; unset: the graph's first input."
    )
    layout: Literal["NCHW", "NHWC"] | None = Field(
        default=None, description="Images: tensor layout; unset: from the graph's shape, else NCHW."
    )
    size: int | list[int] | None = Field(
        default=None,
        description="Images: side of a square input, or [width, height]; unset: the graph's.",
    )
    channel_order: Literal["RGB", "BGR", "gray"] | None = Field(
        default=None, description="Images: channel order the model was trained with (default RGB)."
    )
    dtype: Literal["float32", "uint8", "float16"] | None = Field(
        default=None, description="Input element type; unset: the graph's. uint8 gets raw pixels."
    )
    scale: float | None = Field(
        default=None,
        gt=0,
        description="Images: pixel values are multiplied by this first (default 1/255).",
    )
    mean: list[float] | None = Field(
        default=None,
        description="Subtracted after scaling, per channel (images) or column (series).",
    )
    std: list[float] | None = Field(
        default=None, description="Divided by after the mean, per channel."
    )
    resize: Literal["stretch", "letterbox", "center_crop"] | None = Field(
        default=None, description="Images: how a frame meets the input size (default stretch)."
    )
    sample_rate: int | None = Field(
        default=None, gt=0, description="Audio: resample to this rate (Hz)."
    )
    n_mfcc: int | None = Field(
        default=None, gt=0, description="Audio: MFCC coefficients per frame."
    )
    frames: int | None = Field(
        default=None, gt=0, description="Audio: MFCC frames (cropped or padded)."
    )
    hop_length: int | None = Field(default=None, gt=0, description="Audio: MFCC hop in samples.")
    n_fft: int | None = Field(default=None, gt=0, description="Audio: FFT size of the MFCC.")
    columns: list[str] | None = Field(
        default=None, description="csv/timeseries: the columns the model takes, in its order."
    )
    window: int | None = Field(
        default=None,
        gt=0,
        description="csv/timeseries: rows per input (1 for one row of features).",
    )
    series_layout: Literal["channels_first", "flat"] | None = Field(
        default=None,
        description="csv/timeseries: (N, columns, window) as our encoders, or flat "
        "(N, columns x window) as scikit-learn models; unset: from the graph's rank.",
    )

    @field_validator("size")
    @classmethod
    def _check_size(cls, value: int | list[int] | None) -> int | list[int] | None:
        sizes = [value] if isinstance(value, int) else value or []
        if isinstance(value, list) and len(value) != 2:
            raise ValueError("give one side or [width, height]")
        if any(v < 8 or v > 4096 for v in sizes):
            raise ValueError("sides go from 8 to 4096 pixels")
        return value


class ModelOutputConfig(_Section):
    """What the outputs are and how a verdict is read from them."""

    kind: OutputKind = Field(..., description=" | ".join(OutputKind.__args__))  # type: ignore[attr-defined]
    name: str | None = Field(
        default=None,
        description="Output tensor read (classifier, anomaly, embedding, yolo detector); "
        "unset: the graph's first output.",
    )
    probabilities: bool | None = Field(
        default=None,
        description="Classifier: the output is already probabilities (no softmax); "
        "unset: detected (rows in [0, 1] summing to 1).",
    )
    top_k: int = Field(1, ge=1, le=100, description="Classifier: labels listed per result.")
    anomaly_when: Literal["above", "below"] = Field(
        "above",
        description="Anomaly: which side of the threshold is an anomaly (below: "
        "scikit-learn's decision scores, lower is more abnormal).",
    )
    format: Literal["yolo", "ssd"] = Field(
        "yolo", description="Detector: one YOLOv5/v8 tensor (NMS here), or SSD-style outputs."
    )
    objectness: bool | None = Field(
        default=None,
        description="Detector (yolo): rows carry an objectness score (YOLOv5) or not "
        "(YOLOv8); unset: from the width and the label count.",
    )
    boxes: str = Field("boxes", description="Detector (ssd): the boxes output.")
    scores: str = Field("scores", description="Detector (ssd): the scores output.")
    classes: str = Field("classes", description="Detector (ssd): the class-index output.")
    box_order: Literal["xyxy", "yxyx"] = Field(
        "xyxy", description="Detector (ssd): corner order of the boxes output."
    )
    normalized: bool = Field(
        False, description="Detector (ssd): boxes in [0, 1] of the input, not input pixels."
    )
    score_threshold: float = Field(0.25, ge=0, le=1, description="Detector: lowest score kept.")
    iou_threshold: float = Field(
        0.45, gt=0, le=1, description="Detector: NMS drops boxes overlapping a better one more."
    )
    max_detections: int = Field(100, ge=1, description="Detector: most detections per item.")
    examples: dict[str, Path] = Field(
        default_factory=dict,
        description="Embedding: label -> folder of example inputs; their mean vector is the "
        "label's prototype.",
    )
    percentile: float = Field(
        99.0,
        gt=0,
        le=100,
        description="Embedding: a label's threshold is this percentile of "
        "its examples' distances to their prototype; farther is an anomaly.",
    )

    @field_validator("examples")
    @classmethod
    def _resolve_examples(cls, value: dict[str, Path], info: ValidationInfo) -> dict[str, Path]:
        return {k: p for k, v in value.items() if (p := _resolve(v, info)) is not None}

    @model_validator(mode="after")
    def _check_kind(self) -> ModelOutputConfig:
        if self.kind == "embedding" and not self.examples:
            raise ValueError("examples: an embedding model needs example folders (label: folder)")
        return self


class ModelConfig(_Section):
    """An ONNX model: its file, what it scores, a description, and how onnxruntime runs it.

    The description is for a model that carries no metadata of ours.
    """

    path: Path = Field(..., description="The .onnx file.")
    modality: SourceModality | None = Field(
        default=None,
        description="What the model scores; unset: the key, when the key is a modality.",
    )
    labels: list[str] | None = Field(default=None, description="Class labels, in output order.")
    labels_file: Path | None = Field(
        default=None, description="Or a text file: one label per line."
    )
    input_size: int | None = Field(default=None, gt=0, description="Override the image input size.")
    anomaly_threshold: float | None = Field(
        default=None,
        description="Anomaly: scores above this are anomalies (`cdml-edge calibrate`).",
    )
    input: ModelInputConfig | None = Field(
        default=None, description="The input tensor, for a model without our metadata."
    )
    output: ModelOutputConfig | None = Field(
        default=None, description="What the outputs are; unset: the model's metadata says."
    )
    providers: list[str] | None = Field(
        default=None,
        description="onnxruntime execution providers, in order; unset: CUDA then CPU when "
        "onnxruntime has CUDA, else CPU.",
    )
    intra_op_threads: int = Field(
        1, ge=0, description="Threads inside one operator; 0 = one per core (onnxruntime)."
    )
    inter_op_threads: int = Field(
        1, ge=0, description="Threads across operators; 0 = onnxruntime's choice."
    )
    spinning: bool = Field(
        False, description="Let idle onnxruntime threads busy-wait (costs CPU between runs)."
    )
    graph_optimization: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="onnxruntime graph optimisation level."
    )

    _resolve_paths = field_validator("path", "labels_file")(_resolve)

    @model_validator(mode="after")
    def _check_labels(self) -> ModelConfig:
        if self.labels is not None and self.labels_file is not None:
            raise ValueError("labels: give labels or labels_file, not both")
        if self.output is not None and self.output.kind == "anomaly" and self.labels:
            raise ValueError("labels: an anomaly model has no labels")
        return self


__all__ = ["ModelConfig", "ModelInputConfig", "ModelOutputConfig", "OutputKind"]
