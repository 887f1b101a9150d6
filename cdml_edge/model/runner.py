"""ONNX models of the agent: one onnxruntime session per model, warmed up at start.

A :class:`ModelRunner` wraps a session and its :class:`~cdml_edge.model.spec.ModelSpec`
(read from the ``.onnx`` metadata, with the overrides of the config applied), runs one
batch per window and turns the raw outputs into :class:`Prediction` records: a label and
its softmax probability for classifiers, an anomaly score against the threshold stored
in the model for anomaly models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cdml_edge.errors import CdmlError
from cdml_edge.model.session import InferenceSettings
from cdml_edge.model.spec import (
    ImageInput,
    ModelSpec,
    load_onnx_model,
    prepare_item,
    run_model,
)

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import ModelConfig

log = logging.getLogger(__name__)


class InferenceError(CdmlError, RuntimeError):
    """A model failed to load or run; names the model file."""


@dataclass(frozen=True)
class Prediction:
    """What a model says about one item."""

    label: str | None
    score: float | None
    anomaly: bool
    anomaly_score: float | None


@dataclass(frozen=True)
class ModelOverrides:
    """What the config adds to a model file: overrides of its metadata (all optional) and
    how onnxruntime runs it (:class:`~cdml_edge.model.session.InferenceSettings`)."""

    labels: Sequence[str] | None = None
    input_size: int | None = None
    anomaly_threshold: float | None = None
    settings: InferenceSettings = field(default_factory=InferenceSettings)

    @classmethod
    def from_config(cls, mc: ModelConfig) -> ModelOverrides:
        """The overrides and inference settings of one ``models.<modality>`` section."""
        settings = InferenceSettings.from_config(mc)
        return cls(mc.labels, mc.input_size, mc.anomaly_threshold, settings)


def apply_overrides(spec: ModelSpec, ov: ModelOverrides) -> ModelSpec:
    """``spec`` with the configured labels / input size / threshold in place of the metadata."""
    update: dict[str, Any] = {}
    if ov.labels is not None:
        update["labels"] = list(ov.labels)
    if ov.anomaly_threshold is not None:
        update["anomaly_threshold"] = float(ov.anomaly_threshold)
    if ov.input_size is not None and isinstance(spec.input, ImageInput):
        update["input"] = spec.input.model_copy(update={"size": int(ov.input_size)})
    return spec.model_copy(update=update) if update else spec


class ModelRunner:
    """One loaded model: prepare decoded arrays, run one batch, interpret the outputs."""

    def __init__(
        self,
        session: Any,
        spec: ModelSpec,
        path: Path | None = None,
        settings: InferenceSettings | None = None,
    ) -> None:
        self.session = session
        self.spec = spec
        self.path = path
        self.settings = settings or InferenceSettings()
        # the outputs a verdict is made of (the latent code is not fetched)
        self._verdict_outputs: list[str] = [o for o in spec.outputs if o != "latent"] or [
            *spec.outputs
        ]
        self.load_ms: float | None = None
        self.warmup_ms: float | None = None

    @classmethod
    def load(cls, path: str | Path, overrides: ModelOverrides | None = None) -> ModelRunner:
        ov = overrides or ModelOverrides()
        t0 = time.perf_counter()
        try:
            session, spec = load_onnx_model(path, ov.settings)
        except Exception as exc:
            msg = str(exc)  # model_meta errors already start with the path: do not repeat it
            raise InferenceError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from exc
        runner = cls(session, apply_overrides(spec, ov), Path(path), ov.settings)
        runner.load_ms = (time.perf_counter() - t0) * 1000.0
        return runner

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> str:
        return self.spec.version

    def describe(self) -> str:
        """The providers onnxruntime really uses and the session settings, in one line."""
        return self.settings.describe(self.session.get_providers())

    @property
    def input_bytes(self) -> int:
        """Bytes of one prepared float32 model input."""
        return int(np.prod(self.spec.input.shape())) * 4

    def prepare(self, array: np.ndarray) -> np.ndarray:
        """One decoded array -> model input (raises on a shape the model cannot take)."""
        return prepare_item(self.spec, array)

    def warm_up(self, batch: int = 1) -> float:
        """Run an all-zero batch so the first real window does not pay for lazy init (ms).

        With ``batch`` = the largest window the model will see, onnxruntime sizes its memory
        arena before start-up completes instead of growing it under load.
        """
        t0 = time.perf_counter()
        self.run(np.zeros((max(1, batch), *self.spec.input.shape()), dtype=np.float32))
        self.warmup_ms = (time.perf_counter() - t0) * 1000.0
        return self.warmup_ms

    def run(self, batch: np.ndarray) -> list[Prediction]:
        """Run a prepared batch ``(N, *input_shape)``; one prediction per row."""
        try:
            out = run_model(self.session, self.spec, batch, self._verdict_outputs)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise InferenceError(f"model {self.name} ({self.path}): {exc}") from exc
        return self._interpret(out, batch.shape[0])

    def _interpret(self, out: Mapping[str, np.ndarray], n: int) -> list[Prediction]:
        labels: list[str | None] = [None] * n
        scores: list[float | None] = [None] * n
        if "logits" in out:
            logits = np.asarray(out["logits"], dtype=np.float64).reshape(n, -1)
            z = logits - logits.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            idx = p.argmax(axis=1)
            names = self.spec.labels
            for i in range(n):
                k = int(idx[i])
                labels[i] = names[k] if k < len(names) else str(k)
                scores[i] = float(p[i, k])
        anomaly = [False] * n
        a_scores: list[float | None] = [None] * n
        if "anomaly" in out and self.spec.anomaly_threshold is not None:
            a = np.asarray(out["anomaly"], dtype=np.float64).reshape(n, -1)[:, 0]
            flags = a > self.spec.anomaly_threshold
            for i in range(n):
                a_scores[i] = float(a[i])
                anomaly[i] = bool(flags[i])
                if "logits" not in out:
                    labels[i] = "anomaly" if flags[i] else "normal"
                    scores[i] = float(a[i])
        return [Prediction(labels[i], scores[i], anomaly[i], a_scores[i]) for i in range(n)]


def load_runners(
    models: Mapping[str, tuple[str | Path, ModelOverrides]],
    warm_up: bool = True,
    batch: Mapping[str, int] | None = None,
) -> dict[str, ModelRunner]:
    """Load (and warm up) one runner per modality: ``{modality: (path, overrides)}``.

    ``batch`` gives the warm-up batch per modality (the largest window expected).
    """
    runners: dict[str, ModelRunner] = {}
    for modality, (path, ov) in models.items():
        runner = ModelRunner.load(path, ov)
        warm = ""
        if warm_up:
            runner.warm_up()  # first call: lazy initialisation
            warm = f", warmed up in {runner.warm_up((batch or {}).get(modality, 1)):.1f} ms"
        log.info("model %s %s (%s) for %s: %s; loaded in %.1f ms%s", runner.name,
                 runner.version, path, modality, runner.describe(), runner.load_ms or 0.0, warm)
        runners[modality] = runner
    return runners
