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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cdml_edge.errors import CdmlError
from cdml_edge.modality import ModelModality
from cdml_edge.model.session import InferenceSettings, resolve_providers

if TYPE_CHECKING:  # pragma: no cover
    import onnxruntime

META_KEY = "cdml.spec"
INPUT_NAME = "input"

Task = Literal["classifier", "anomaly"]
OutputName = Literal["latent", "logits", "anomaly"]


class ModelSpecError(CdmlError, ValueError):
    """A model file or spec is unusable; the message names the file or field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageInput(_Strict):
    """Images: resized to ``size``×``size``, scaled to [0, 1], then ``(x - mean) / std``."""

    kind: Literal["image"] = "image"
    channels: Literal[1, 3] = 3
    size: int = Field(default=32, ge=8, le=1024)
    mean: list[float] = Field(default_factory=lambda: [0.5, 0.5, 0.5])
    std: list[float] = Field(default_factory=lambda: [0.5, 0.5, 0.5])
    layout: Literal["NCHW"] = "NCHW"

    @model_validator(mode="after")
    def _check(self) -> ImageInput:
        _check_stats(self.mean, self.std, self.channels, "image")
        return self

    def shape(self) -> list[int]:
        """Input shape without the batch dimension."""
        return [self.channels, self.size, self.size]


class AudioInput(_Strict):
    """MFCC frames (n_mfcc × frames), per-coefficient ``(x - mean) / std``."""

    kind: Literal["audio"] = "audio"
    sample_rate: int = Field(default=16000, gt=0)
    n_mfcc: int = Field(default=20, gt=0)
    hop_length: int = Field(default=512, gt=0)
    n_fft: int = Field(default=2048, gt=0)
    frames: int = Field(default=32, gt=0)
    mean: list[float] | None = None
    std: list[float] | None = None

    @model_validator(mode="after")
    def _check(self) -> AudioInput:
        _check_stats(self.mean, self.std, self.n_mfcc, "audio")
        return self

    def shape(self) -> list[int]:
        return [self.n_mfcc, self.frames]

    def decode_kwargs(self) -> dict[str, int]:
        """MFCC parameters to pass to the audio decoder."""
        return {
            "sample_rate": self.sample_rate,
            "n_mfcc": self.n_mfcc,
            "hop_length": self.hop_length,
            "n_fft": self.n_fft,
        }


class SeriesInput(_Strict):
    """Time series / CSV rows: ``window`` rows × ``channels`` columns, per-column normalised.

    The model sees ``(channels, window)``; CSV tables with one row of features use
    ``window=1``.
    """

    kind: Literal["series"] = "series"
    channels: int = Field(gt=0)
    window: int = Field(gt=0)
    columns: list[str] | None = None
    mean: list[float] | None = None
    std: list[float] | None = None

    @model_validator(mode="after")
    def _check(self) -> SeriesInput:
        _check_stats(self.mean, self.std, self.channels, "series")
        if self.columns is not None and len(self.columns) != self.channels:
            raise ValueError(f"columns: {len(self.columns)} names for {self.channels} channels")
        return self

    def shape(self) -> list[int]:
        return [self.channels, self.window]


ModelInput = ImageInput | AudioInput | SeriesInput
InputSpec = Annotated[ModelInput, Field(discriminator="kind")]

# the input kind a model of each modality takes
INPUT_KIND: dict[ModelModality, str] = {
    "image": "image",
    "audio": "audio",
    "csv": "series",
    "timeseries": "series",
}


class ModelSpec(_Strict):
    """Everything the appliance needs to run a model file."""

    name: str = Field(min_length=1)
    version: str = "0.1.0"
    modality: ModelModality
    task: Task
    input: InputSpec
    labels: list[str] = Field(default_factory=list)
    anomaly_threshold: float | None = None
    outputs: list[OutputName] = Field(default_factory=list)
    latent_dim: int | None = None
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        want = INPUT_KIND[self.modality]
        if self.input.kind != want:
            kind = self.input.kind
            raise ValueError(f"input.kind {kind!r} does not fit modality {self.modality}")
        if self.task == "anomaly" and self.anomaly_threshold is None:
            raise ValueError("anomaly_threshold is required for task 'anomaly'")
        if self.task == "classifier" and not self.labels:
            raise ValueError("labels are required for task 'classifier'")
        if not self.outputs:
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
            raise ModelSpecError(f"{source}: invalid {META_KEY!r}: {exc}") from exc

    def input_shape(self, batch: int | str = "N") -> list[int | str]:
        return [batch, *self.input.shape()]

    def is_anomalous(self, score: np.ndarray | float) -> np.ndarray:
        """``score > anomaly_threshold`` (element-wise)."""
        if self.anomaly_threshold is None:
            raise ModelSpecError(f"{self.name}: not an anomaly model")
        return np.asarray(score) > self.anomaly_threshold


def _check_stats(mean: list[float] | None, std: list[float] | None, n: int, what: str) -> None:
    if (mean is None) != (std is None):
        raise ValueError(f"{what}: give both mean and std, or neither")
    if mean is None or std is None:
        return
    if len(mean) != n or len(std) != n:
        raise ValueError(f"{what}: mean/std need {n} values, got {len(mean)}/{len(std)}")
    if any(s <= 0 for s in std):
        raise ValueError(f"{what}: std values must be > 0")


# -- input preparation (shared by training and serving) ------------------------------------------


def prepare_batch(spec: ModelSpec, decoded: Iterable[np.ndarray]) -> np.ndarray:
    """Decoded arrays -> float32 model input ``(N, *spec.input.shape())``.

    Images: uint8 H×W×3 RGB (or H×W grey, or float in [0, 1]); audio: MFCC arrays
    ``(n_mfcc, T)``; series: float arrays ``(T, channels)``.
    """
    return np.stack([prepare_item(spec, a) for a in decoded]).astype(np.float32, copy=False)


def prepare_item(spec: ModelSpec, array: np.ndarray) -> np.ndarray:
    """One decoded array -> float32 ``spec.input.shape()`` (see :func:`prepare_batch`)."""
    inp = spec.input
    if isinstance(inp, ImageInput):
        return _prepare_image(inp, array)
    if isinstance(inp, AudioInput):
        return _prepare_audio(inp, array)
    return _prepare_series(inp, array)


def _prepare_image(inp: ImageInput, img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 3 and a.shape[2] == 4:
        a = a[:, :, :3]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ModelSpecError(f"image: expected H×W or H×W×3 array, got shape {a.shape}")
    x = a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)
    if x.shape[0] != inp.size or x.shape[1] != inp.size:
        x = _resize(x, inp.size)
    if inp.channels == 1 and x.ndim == 3:
        x = x @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    if x.ndim == 2:
        x = x[:, :, None] if inp.channels == 1 else np.repeat(x[:, :, None], 3, axis=2)
    mean = np.asarray(inp.mean, dtype=np.float32)
    std = np.asarray(inp.std, dtype=np.float32)
    x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


def _resize(x: np.ndarray, size: int) -> np.ndarray:
    import cv2  # appliance dependency; imported here to keep this module light

    shrinking = x.shape[0] > size or x.shape[1] > size
    interp = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    out = cv2.resize(x, (size, size), interpolation=interp)
    return np.asarray(out, dtype=np.float32)


def _fit_length(x: np.ndarray, n: int) -> np.ndarray:
    """Crop (centre) or edge-pad axis 1 of a 2-D array to ``n``."""
    t = x.shape[1]
    if t == n:
        return x
    if t > n:
        start = (t - n) // 2
        return x[:, start : start + n]
    if t == 0:
        return np.zeros((x.shape[0], n), dtype=x.dtype)
    return np.pad(x, ((0, 0), (0, n - t)), mode="edge")


def _normalise(x: np.ndarray, mean: list[float] | None, std: list[float] | None) -> np.ndarray:
    if mean is None or std is None:
        return x
    m = np.asarray(mean, dtype=np.float32)[:, None]
    s = np.asarray(std, dtype=np.float32)[:, None]
    return (x - m) / s


def _prepare_audio(inp: AudioInput, mfcc: np.ndarray) -> np.ndarray:
    a = np.asarray(mfcc, dtype=np.float32)
    if a.ndim == 3 and a.shape[0] == 1:  # (1, n_mfcc, T)
        a = a[0]
    if a.ndim != 2:
        raise ModelSpecError(f"audio: expected MFCC array (n_mfcc, T), got shape {a.shape}")
    if a.shape[0] != inp.n_mfcc and a.shape[1] == inp.n_mfcc:
        a = a.T
    if a.shape[0] != inp.n_mfcc:
        raise ModelSpecError(f"audio: expected {inp.n_mfcc} MFCC coefficients, got {a.shape}")
    a = _fit_length(a, inp.frames)
    return np.ascontiguousarray(_normalise(a, inp.mean, inp.std), dtype=np.float32)


def _prepare_series(inp: SeriesInput, table: np.ndarray) -> np.ndarray:
    a = np.asarray(table, dtype=np.float32)
    if a.ndim == 1:
        a = a[None, :] if a.shape[0] == inp.channels else a[:, None]
    if a.ndim != 2:
        raise ModelSpecError(f"series: expected (rows, columns) array, got shape {a.shape}")
    if a.shape[1] != inp.channels:
        raise ModelSpecError(f"series: expected {inp.channels} columns, got {a.shape[1]}")
    a = _fit_length(np.nan_to_num(a).T, inp.window)  # (channels, window)
    return np.ascontiguousarray(_normalise(a, inp.mean, inp.std), dtype=np.float32)


def fit_input_stats(spec: ModelSpec, decoded: Iterable[np.ndarray]) -> ModelSpec:
    """Return ``spec`` with per-channel mean/std of audio/series input measured on ``decoded``.

    Statistics are taken on exactly what :func:`prepare_batch` produces without
    normalisation. Image specs are returned unchanged (their stats are fixed), without
    consuming ``decoded`` (so a generator of decoded items costs nothing for images).
    """
    inp = spec.input
    if isinstance(inp, ImageInput):
        return spec
    raw_input = inp.model_copy(update={"mean": None, "std": None})
    raw = prepare_batch(spec.model_copy(update={"input": raw_input}), decoded)
    mean = raw.mean(axis=(0, 2))
    std = np.maximum(raw.std(axis=(0, 2)), 1e-6)
    new_input = inp.model_copy(
        update={"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
    )
    return spec.model_copy(update={"input": new_input})


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
    import onnxruntime as ort

    p = Path(path)
    if not p.is_file():
        raise ModelSpecError(f"{p}: model file not found")
    s = settings or InferenceSettings()
    try:
        session = ort.InferenceSession(
            str(p), sess_options=s.session_options(), providers=resolve_providers(s.providers)
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelSpecError(f"{p}: onnxruntime cannot load the model: {exc}") from exc
    spec = read_spec(session, str(p))
    names = {o.name for o in session.get_outputs()}
    missing = [o for o in spec.outputs if o not in names]
    if missing:
        raise ModelSpecError(f"{p}: outputs {missing} named in metadata are not in the graph")
    return session, spec


def run_model(
    session: onnxruntime.InferenceSession,
    spec: ModelSpec,
    batch: np.ndarray,
    outputs: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Run a prepared batch; returns output name -> array for ``outputs`` (default: all of
    ``spec.outputs``)."""
    names = list(spec.outputs if outputs is None else outputs)
    results = session.run(names, {INPUT_NAME: batch.astype(np.float32, copy=False)})
    return {name: np.asarray(r) for name, r in zip(names, results, strict=True)}
