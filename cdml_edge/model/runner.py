"""ONNX models of the agent: one onnxruntime session per model, warmed up at start.

A :class:`ModelRunner` wraps a session, its :class:`~cdml_edge.model.spec.ModelSpec` (read
from the ``.onnx`` metadata, or built from the configuration's description of a model without
it, see :mod:`cdml_edge.model.describe`) and the :class:`~cdml_edge.model.heads.Head` that
reads its outputs. It runs one batch per window and returns one
:class:`~cdml_edge.model.heads.Prediction` per item: a label and its probability for
classifiers (top k on request), a score against a threshold for anomaly models, the nearest
prototype for embeddings, boxes in source pixels for detectors.
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
from cdml_edge.modality import MODEL_MODALITIES
from cdml_edge.model.describe import Description, describe_model
from cdml_edge.model.graph_check import graph_problems
from cdml_edge.model.heads import Geometries, Head, Prediction, SpecHead
from cdml_edge.model.prepare import prepare_item
from cdml_edge.model.session import InferenceSettings
from cdml_edge.model.spec import ModelSpec, ModelSpecError, has_spec, open_session, run_model

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import ModelConfig

log = logging.getLogger(__name__)


class InferenceError(CdmlError, RuntimeError):
    """A model failed to load or run; names the model file."""


class ModelUnusable(InferenceError):
    """A model file that cannot be opened or used as a model at all (not one failing to run).

    ``key``: the model's name in the configuration, once :func:`load_runners` knows it.
    """

    def __init__(self, message: str, path: Path, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


@dataclass(frozen=True)
class ModelOverrides:
    """What the config adds to a model file.

    Overrides of its metadata (all optional), the description of a model without metadata,
    and how onnxruntime runs it (:class:`~cdml_edge.model.session.InferenceSettings`).
    """

    labels: Sequence[str] | None = None
    input_size: int | None = None
    anomaly_threshold: float | None = None
    settings: InferenceSettings = field(default_factory=InferenceSettings)
    description: Description | None = None

    @classmethod
    def from_config(cls, mc: ModelConfig, name: str | None = None) -> ModelOverrides:
        """The overrides, description and inference settings of ``models.<name>``."""
        settings = InferenceSettings.from_config(mc)
        desc = Description.from_config(mc, name)
        return cls(mc.labels, mc.input_size, mc.anomaly_threshold, settings, desc)

    def describe(self) -> Description:
        """The description (the bare overrides when none was given)."""
        if self.description is not None:
            return self.description
        labels = list(self.labels) if self.labels is not None else None
        return Description(
            labels=labels, input_size=self.input_size, anomaly_threshold=self.anomaly_threshold
        )


class ModelRunner:
    """One loaded model: prepare decoded arrays, run one batch, interpret the outputs."""

    def __init__(
        self,
        session: Any,
        spec: ModelSpec,
        path: Path | None = None,
        settings: InferenceSettings | None = None,
        head: Head | None = None,
        modality: str | None = None,
    ) -> None:
        self.session = session
        self.spec = spec
        self.path = path
        self.settings = settings or InferenceSettings()
        verdict = [o for o in spec.outputs if o != "latent"] or [*spec.outputs]
        self.head = head or SpecHead(verdict, list(spec.labels), spec.anomaly_threshold)
        self.modality = modality or spec.modality
        self.one_at_a_time = _fixed_batch_of_one(session, spec.input_name)
        self.load_ms: float | None = None
        self.warmup_ms: float | None = None

    @classmethod
    def load(cls, path: str | Path, overrides: ModelOverrides | None = None) -> ModelRunner:
        """Open the model at ``path`` and check its spec and head against the graph.

        Raises :class:`ModelUnusable` naming the path when it cannot be used.
        """
        ov = overrides or ModelOverrides()
        desc = ov.describe()
        p = Path(path)
        t0 = time.perf_counter()
        try:
            session = open_session(p, ov.settings)
            described = desc.output is not None or not has_spec(session)
            spec, head = describe_model(session, p, desc)
            problems = (
                graph_problems(session, spec, head)
                if described  # our metadata: first the outputs it names, then the rest
                else _missing(session, spec) or graph_problems(session, spec, head)
            )
            if problems:
                raise ModelSpecError(f"{p}: " + "; ".join(problems))
        except Exception as exc:
            msg = str(exc)  # model_meta errors already start with the path: do not repeat it
            msg = msg if msg.startswith(str(path)) else f"{path}: {msg}"
            if _about_the_file(exc):
                raise ModelUnusable(msg, p) from exc
            raise InferenceError(msg) from exc  # out of memory, a broken onnxruntime: exit 3
        runner = cls(session, spec, p, ov.settings, head, desc.modality)
        runner.load_ms = (time.perf_counter() - t0) * 1000.0
        return runner

    @property
    def name(self) -> str:
        """The model's name, from its spec."""
        return self.spec.name

    @property
    def version(self) -> str:
        """The model's version, from its spec."""
        return self.spec.version

    @property
    def kind(self) -> str:
        """What the outputs are.

        ``spec`` (our metadata), ``classifier``, ``anomaly``, ``embedding`` or ``detector``.
        """
        return self.head.kind

    def describe(self) -> str:
        """The providers onnxruntime really uses and the session settings, in one line."""
        return self.settings.describe(self.session.get_providers())

    @property
    def input_bytes(self) -> int:
        """Bytes of one prepared model input."""
        return int(np.prod(self.spec.input.shape())) * np.dtype(self.spec.input.dtype).itemsize

    def prepare(self, array: np.ndarray) -> np.ndarray:
        """One decoded array -> model input (raises on a shape the model cannot take)."""
        return prepare_item(self.spec, array)

    def warm_up(self, batch: int = 1) -> float:
        """Run an all-zero batch so the first real window does not pay for lazy init (ms).

        With ``batch`` = the largest window the model will see, onnxruntime sizes its memory
        arena before start-up completes instead of growing it under load.
        """
        t0 = time.perf_counter()
        zeros = np.zeros((max(1, batch), *self.spec.input.shape()), dtype=self.spec.input.dtype)
        self.raw(zeros)
        self.warmup_ms = (time.perf_counter() - t0) * 1000.0
        return self.warmup_ms

    def raw(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """The head's outputs for a prepared batch, as the graph gives them."""
        try:
            if self.one_at_a_time and batch.shape[0] > 1:  # an export fixed to batch 1
                rows = [
                    run_model(self.session, self.spec, batch[i : i + 1], self.head.outputs)
                    for i in range(batch.shape[0])
                ]
                return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
            return run_model(self.session, self.spec, batch, self.head.outputs)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise InferenceError(f"model {self.name} ({self.path}): {exc}") from exc

    def run(self, batch: np.ndarray, geometry: Geometries = ()) -> list[Prediction]:
        """Run a prepared batch ``(N, *input_shape)``; one prediction per row.

        ``geometry``: per row, where the input's pixels came from (detectors map boxes back
        with it).
        """
        out = self.raw(batch)
        try:
            return self.head.interpret(out, batch.shape[0], geometry)
        except (ValueError, IndexError, KeyError) as exc:
            raise InferenceError(f"model {self.name} ({self.path}): outputs: {exc}") from exc


def _fixed_batch_of_one(session: Any, input_name: str) -> bool:
    """Whether the graph's input takes exactly one item (many exports fix the batch at 1)."""
    for i in session.get_inputs():
        if i.name == input_name:
            return bool(i.shape) and i.shape[0] == 1
    return False


def _missing(session: Any, spec: ModelSpec) -> list[str]:
    names = {o.name for o in session.get_outputs()}
    missing = [o for o in spec.outputs if o not in names]
    return [f"outputs {missing} named in metadata are not in the graph"] if missing else []


_ORT_FILE_ERRORS = frozenset({"InvalidProtobuf", "InvalidGraph", "NoSuchFile", "NotImplemented"})
"""onnxruntime's errors that are about the model file (not memory, not the library)."""


def _about_the_file(exc: BaseException) -> bool:
    """Whether ``exc`` says the model file cannot be used (a configuration problem)."""
    file_errors = (ModelSpecError, FileNotFoundError, IsADirectoryError, PermissionError)
    return isinstance(exc, file_errors) or type(exc).__name__ in _ORT_FILE_ERRORS


def load_runners(
    models: Mapping[str, tuple[str | Path, ModelOverrides]],
    warm_up: bool = True,
    batch: Mapping[str, int] | None = None,
) -> dict[str, ModelRunner]:
    """Load (and warm up) one runner per model: ``{name: (path, overrides)}``.

    The name is a modality for a model keyed by its modality.

    ``batch`` gives the warm-up batch per name (the largest window expected).
    """
    runners: dict[str, ModelRunner] = {}
    for key, (path, ov) in models.items():
        try:
            runner = ModelRunner.load(path, ov)
        except ModelUnusable as exc:
            raise ModelUnusable(str(exc), exc.path, key) from exc.__cause__
        if key in MODEL_MODALITIES and ov.describe().modality is None:
            runner.modality = key  # keyed by its modality: it scores that modality's items
        warm = ""
        if warm_up:
            runner.warm_up()  # first call: lazy initialisation
            warm = f", warmed up in {runner.warm_up((batch or {}).get(key, 1)):.1f} ms"
        log.info(
            "model %s %s (%s) for %s: %s; loaded in %.1f ms%s",
            runner.name,
            runner.version,
            path,
            key,
            runner.describe(),
            runner.load_ms or 0.0,
            warm,
        )
        runners[key] = runner
    return runners


__all__ = [
    "InferenceError",
    "ModelOverrides",
    "ModelRunner",
    "ModelUnusable",
    "Prediction",
    "load_runners",
]
