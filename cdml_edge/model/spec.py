"""What a model expects and produces, stored inside its ``.onnx`` file (torch-free).

A :class:`ModelSpec` names the model, its modality and task, the input it takes
(shape and normalisation, MFCC parameters), its labels and, for anomaly models, the
threshold on the ``anomaly`` output. The exporter writes it into the ONNX custom
metadata; :func:`load_onnx_model` reads it back, so the appliance needs nothing but the
file and onnxruntime.

:func:`prepare_batch` turns decoded arrays (from :mod:`cdml_edge.decode`) into the
model input. Training uses the very same function, so there is no train/serve skew.

Graph contract:

* ``classifier`` models take ``input`` and output ``logits`` (N, classes) and ``latent``.
* ``anomaly`` models take ``input`` and output ``anomaly`` (N,), the distance of the
  latent code to the prototype of normal data, and ``latent``; an item is anomalous
  when ``anomaly > spec.anomaly_threshold``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cdml_edge.modality import ModelModality
from cdml_edge.model.inputs import (
    INPUT_KIND,
    AudioInput,
    ImageInput,
    InputSpec,
    ModelInput,
    ModelSpecError,
    SeriesInput,
    one_line,
)
from cdml_edge.model.prepare import fit_input_stats, prepare_batch, prepare_item
from cdml_edge.model.session import InferenceSettings, resolve_providers

if TYPE_CHECKING:  # pragma: no cover
    import onnxruntime

__all__ = [
    "INPUT_KIND",
    "INPUT_NAME",
    "META_KEY",
    "AudioInput",
    "ImageInput",
    "InputSpec",
    "ModelInput",
    "ModelSpec",
    "ModelSpecError",
    "SeriesInput",
    "fit_input_stats",
    "has_spec",
    "load_onnx_model",
    "open_session",
    "prepare_batch",
    "prepare_item",
    "read_spec",
    "run_model",
]

META_KEY = "cdml.spec"
INPUT_NAME = "input"

Task = Literal["classifier", "anomaly", "embedding", "detector"]
OutputName = Literal["latent", "logits", "anomaly"]  # the outputs of our own models


class _StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_StrictSpec):
    """Everything the appliance needs to run a model file."""

    name: str = Field(min_length=1)
    version: str = "0.1.0"
    modality: ModelModality
    task: Task
    input: InputSpec
    labels: list[str] = Field(default_factory=list)
    anomaly_threshold: float | None = None
    outputs: list[str] = Field(default_factory=list)
    input_name: str = INPUT_NAME
    latent_dim: int | None = None
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        want = INPUT_KIND[self.modality]
        if self.input.kind != want:
            kind = self.input.kind
            raise ValueError(f"input.kind {kind!r} does not fit modality {self.modality}")
        ours = not self.outputs or "anomaly" in self.outputs  # a described model may be
        if self.task == "anomaly" and self.anomaly_threshold is None and ours:  # uncalibrated
            raise ValueError("anomaly_threshold is required for task 'anomaly'")
        if self.task in ("classifier", "detector") and not self.labels:
            raise ValueError(f"labels are required for task {self.task!r}")
        if not self.outputs and self.task in ("classifier", "anomaly"):
            default: list[OutputName] = (
                ["logits", "latent"] if self.task == "classifier" else ["anomaly", "latent"]
            )
            object.__setattr__(self, "outputs", default)
        return self

    # -- metadata -----------------------------------------------------------------------------

    def to_metadata(self) -> dict[str, str]:
        """ONNX custom metadata: the full spec as JSON plus a few readable keys."""
        meta = {
            META_KEY: self.model_dump_json(),
            "cdml.name": self.name,
            "cdml.version": self.version,
            "cdml.modality": self.modality,
            "cdml.task": self.task,
            "cdml.labels": json.dumps(self.labels),
            "cdml.input_shape": json.dumps(self.input.shape()),
        }
        if self.anomaly_threshold is not None:
            meta["cdml.anomaly_threshold"] = repr(float(self.anomaly_threshold))
        return meta

    @classmethod
    def from_metadata(cls, meta: dict[str, str], source: str = "<metadata>") -> ModelSpec:
        """Inverse of :meth:`to_metadata`; ``source`` names the file in errors."""
        raw = meta.get(META_KEY)
        if raw is None:
            raise ModelSpecError(f"{source}: no {META_KEY!r} entry in the model metadata")
        try:
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            raise ModelSpecError(f"{source}: invalid {META_KEY!r}: {one_line(exc)}") from exc

    def input_shape(self, batch: int | str = "N") -> list[int | str]:
        """The input's shape with ``batch`` as its first dimension."""
        return [batch, *self.input.shape()]

    def is_anomalous(self, score: np.ndarray | float) -> np.ndarray:
        """``score > anomaly_threshold`` (element-wise)."""
        if self.anomaly_threshold is None:
            raise ModelSpecError(f"{self.name}: not an anomaly model")
        return np.asarray(score) > self.anomaly_threshold


# -- running --------------------------------------------------------------------------------------


def read_spec(model: Any, source: str = "<model>") -> ModelSpec:
    """Spec from an ``onnxruntime.InferenceSession``."""
    meta = dict(model.get_modelmeta().custom_metadata_map)
    return ModelSpec.from_metadata(meta, source)


def load_onnx_model(
    path: str | Path, settings: InferenceSettings | None = None
) -> tuple[onnxruntime.InferenceSession, ModelSpec]:
    """Open an ``.onnx`` file with onnxruntime and read its :class:`ModelSpec`.

    ``settings``: providers, threads, spinning, graph optimisation (default: the small-board
    defaults of :class:`~cdml_edge.model.session.InferenceSettings`).
    """
    p = Path(path)
    session = open_session(p, settings)
    spec = read_spec(session, str(p))
    names = {o.name for o in session.get_outputs()}
    missing = [o for o in spec.outputs if o not in names]
    if missing:
        raise ModelSpecError(f"{p}: outputs {missing} named in metadata are not in the graph")
    return session, spec


def open_session(
    path: str | Path, settings: InferenceSettings | None = None
) -> onnxruntime.InferenceSession:
    """An onnxruntime session of the ``.onnx`` file.

    :class:`ModelSpecError` naming the file when it is missing or onnxruntime refuses it.
    """
    import onnxruntime as ort

    p = Path(path)
    if not p.is_file():
        raise ModelSpecError(f"{p}: model file not found")
    s = settings or InferenceSettings()
    try:
        return ort.InferenceSession(
            str(p), sess_options=s.session_options(), providers=resolve_providers(s.providers)
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelSpecError(f"{p}: onnxruntime cannot load the model: {exc}") from exc


def has_spec(session: Any) -> bool:
    """Whether the session's model carries our ``cdml.spec`` metadata."""
    return META_KEY in dict(session.get_modelmeta().custom_metadata_map)


def run_model(
    session: onnxruntime.InferenceSession,
    spec: ModelSpec,
    batch: np.ndarray,
    outputs: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Run a prepared batch; returns output name -> array for ``outputs``.

    ``outputs`` defaults to all of ``spec.outputs``.
    """
    names = list(spec.outputs if outputs is None else outputs)
    feed = batch.astype(np.dtype(spec.input.dtype), copy=False)
    results = session.run(names, {spec.input_name: feed})
    return {name: np.asarray(r) for name, r in zip(names, results, strict=True)}
