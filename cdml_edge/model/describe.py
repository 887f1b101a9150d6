"""A model without our metadata, described by the configuration: its spec and output head.

Defaults come from the graph, and the description is checked against the graph.

:func:`describe_model` returns the :class:`~cdml_edge.model.spec.ModelSpec` (input name,
layout, size, dtype, normalisation; labels; threshold) and the
:class:`~cdml_edge.model.heads.Head` that reads its outputs. A model that carries
``cdml.spec`` keeps it as the defaults of every key the configuration leaves unset.
:func:`graph_problems` says what in a description does not fit the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdml_edge.config.model_section import ModelConfig, ModelInputConfig, ModelOutputConfig
from cdml_edge.model.heads import (
    AnomalyScoreHead,
    ClassifierHead,
    DetectorHead,
    EmbeddingHead,
    Head,
    SpecHead,
)
from cdml_edge.model.inputs import (
    INPUT_KIND,
    AudioInput,
    DType,
    ImageInput,
    ModelInput,
    ModelSpecError,
    SeriesInput,
    one_line,
)
from cdml_edge.model.spec import ModelSpec, has_spec, read_spec

_DTYPES: dict[str, DType] = {
    "tensor(float)": "float32",
    "tensor(uint8)": "uint8",
    "tensor(float16)": "float16",
}


@dataclass(frozen=True)
class Description:
    """What the configuration says about a model (all optional for our own models)."""

    name: str | None = None
    modality: str | None = None
    labels: list[str] | None = None
    labels_file: Path | None = None
    input_size: int | None = None
    anomaly_threshold: float | None = None
    input: ModelInputConfig | None = None
    output: ModelOutputConfig | None = None

    @classmethod
    def from_config(cls, mc: ModelConfig, name: str | None = None) -> Description:
        """The description in a model's configuration section."""
        return cls(
            name,
            mc.modality,
            mc.labels,
            mc.labels_file,
            mc.input_size,
            mc.anomaly_threshold,
            mc.input,
            mc.output,
        )

    def read_labels(self) -> list[str] | None:
        """The labels given inline or in ``labels_file`` (one per line, blank lines skipped)."""
        if self.labels is not None or self.labels_file is None:
            return self.labels
        try:
            text = self.labels_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelSpecError(f"{self.labels_file}: labels_file cannot be read: {exc}") from exc
        return [line.strip() for line in text.splitlines() if line.strip()]


def describe_model(session: Any, path: Path, desc: Description) -> tuple[ModelSpec, Head]:
    """The spec and head of the model in ``session`` (``path`` names it in errors)."""
    labels = desc.read_labels()
    if has_spec(session):
        spec = _with_overrides(read_spec(session, str(path)), desc, labels)
        if desc.output is None:
            verdict = [o for o in spec.outputs if o != "latent"] or list(spec.outputs)
            return spec, SpecHead(verdict, list(spec.labels), spec.anomaly_threshold)
        head = build_head(desc.output, spec, session, labels or list(spec.labels))
        return spec.model_copy(update={"task": desc.output.kind, "outputs": head.outputs}), head
    output = desc.output or _implied_output(desc, labels, path)
    if desc.modality not in INPUT_KIND:
        raise ModelSpecError(f"{path}: give the modality of this model (models.<name>.modality)")
    spec = _foreign_spec(session, path, desc, labels or [], output)
    head = build_head(output, spec, session, list(spec.labels))
    return spec.model_copy(update={"outputs": head.outputs}), head


def _implied_output(desc: Description, labels: list[str] | None, path: Path) -> ModelOutputConfig:
    """A model without metadata or ``output``.

    A classifier when labels are given, an anomaly scorer when a threshold is.
    """
    if labels:
        return ModelOutputConfig.model_validate({"kind": "classifier"})
    if desc.anomaly_threshold is not None:
        return ModelOutputConfig.model_validate({"kind": "anomaly"})
    raise ModelSpecError(
        f"{path}: no 'cdml.spec' entry in the model metadata: describe the model with "
        "models.<name>.output (kind: classifier | anomaly | embedding | detector), its labels "
        "and, where the graph does not say, models.<name>.input"
    )


def _with_overrides(spec: ModelSpec, desc: Description, labels: list[str] | None) -> ModelSpec:
    update: dict[str, Any] = {}
    if labels is not None:
        update["labels"] = list(labels)
    if desc.anomaly_threshold is not None:
        update["anomaly_threshold"] = float(desc.anomaly_threshold)
    inp = spec.input
    if isinstance(inp, ImageInput) and desc.input_size is not None:
        inp = inp.model_copy(update={"size": int(desc.input_size), "height": None})
    if desc.input is not None:
        inp = _input_update(inp, desc.input)
        if desc.input.name is not None:
            update["input_name"] = desc.input.name
    if inp is not spec.input:
        update["input"] = type(inp).model_validate(inp.model_dump())
    return spec.model_copy(update=update) if update else spec


def _input_update(inp: ModelInput, d: ModelInputConfig) -> ModelInput:
    """``inp`` with every key the description sets."""
    given = {k: v for k, v in d.model_dump().items() if v is not None}
    update: dict[str, Any] = {}
    if isinstance(inp, ImageInput):
        update = _image_keys(given)
    elif isinstance(inp, AudioInput):
        keys: tuple[str, ...] = (
            "sample_rate",
            "n_mfcc",
            "frames",
            "hop_length",
            "n_fft",
            "mean",
            "std",
            "dtype",
        )
        update = {k: given[k] for k in keys if k in given}
    else:
        keys = ("columns", "window", "mean", "std", "dtype")
        update = {k: given[k] for k in keys if k in given}
        if "series_layout" in given:
            update["flat"] = given["series_layout"] == "flat"
        if "columns" in given:
            update["channels"] = len(given["columns"])
    return inp.model_copy(update=update)


def _image_keys(given: dict[str, Any]) -> dict[str, Any]:
    keys = ("layout", "dtype", "scale", "mean", "std", "resize")
    out: dict[str, Any] = {k: given[k] for k in keys if k in given}
    size = given.get("size")
    if size is not None:
        w, h = (size, size) if isinstance(size, int) else size
        out["size"], out["height"] = int(w), (int(h) if h != w else None)
    order = given.get("channel_order")
    if order is not None:
        out["channels"] = 1 if order == "gray" else 3
        out["order"] = "RGB" if order == "gray" else order
    return out


def _graph_input(session: Any, name: str | None, path: Path) -> Any:
    inputs = session.get_inputs()
    if name is None:
        return inputs[0]
    for i in inputs:
        if i.name == name:
            return i
    have = ", ".join(i.name for i in inputs)
    raise ModelSpecError(f"{path}: input.name {name!r} is not an input of the graph ({have})")


def _static(dim: Any) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _foreign_spec(
    session: Any, path: Path, desc: Description, labels: list[str], output: ModelOutputConfig
) -> ModelSpec:
    d = desc.input or ModelInputConfig.model_validate({})
    gi = _graph_input(session, d.name, path)
    dtype = d.dtype or _DTYPES.get(gi.type)
    if dtype is None:
        raise ModelSpecError(
            f"{path}: input {gi.name!r} is {gi.type}; supported: float32, uint8, float16"
        )
    modality = str(desc.modality)
    kind = INPUT_KIND[modality]  # type: ignore[index]
    dims = [_static(v) for v in gi.shape]
    if kind == "image":
        inp: ModelInput = _image_input(d, dims, dtype, desc.input_size, path)
    elif kind == "audio":
        inp = _audio_input(d, dims, dtype, path)
    else:
        inp = _series_input(d, dims, dtype, path)
    if output.kind == "embedding":
        labels = list(output.examples)
    try:
        return ModelSpec(
            name=desc.name or path.stem,
            version="external",
            modality=modality,  # type: ignore[arg-type]
            task=output.kind,
            input=inp,
            labels=labels,
            outputs=["described"],
            anomaly_threshold=desc.anomaly_threshold,
            input_name=gi.name,
        )
    except ValueError as exc:
        raise ModelSpecError(f"{path}: {one_line(exc)}") from exc


def _input_error(path: Path, exc: ValueError) -> ModelSpecError:
    """``exc`` of building an input spec as a :class:`ModelSpecError` naming ``path`` once."""
    if isinstance(exc, ModelSpecError):  # already names the file
        return exc
    return ModelSpecError(f"{path}: input: {one_line(exc)}")


def _need(value: int | None, what: str, path: Path) -> int:
    if value is None:
        raise ModelSpecError(f"{path}: the graph does not fix {what}: give models.<name>.{what}")
    return value


def _image_input(
    d: ModelInputConfig, dims: list[int | None], dtype: DType, size: int | None, path: Path
) -> ImageInput:
    if len(dims) != 4:
        raise ModelSpecError(
            f"{path}: an image input has 4 dimensions, the graph's has {len(dims)}"
        )
    layout = d.layout or ("NHWC" if dims[3] in (1, 3) and dims[1] not in (1, 3) else "NCHW")
    c, h, w = (dims[1], dims[2], dims[3]) if layout == "NCHW" else (dims[3], dims[1], dims[2])
    given_size = d.size is not None or size is not None  # else the sides come from the graph
    if d.layout is not None and not given_size and c is not None and c not in (1, 3):
        other = "NHWC" if layout == "NCHW" else "NCHW"
        shape = "x".join("?" if v is None else str(v) for v in dims)
        raise ModelSpecError(
            f"{path}: input.layout: {layout} reads the graph's input ({shape}) as {c} "
            f"channels; an image has 1 or 3: set input.layout: {other}, or leave it unset "
            "(read off the graph)"
        )
    order = d.channel_order or ("gray" if c == 1 else "RGB")
    channels = 1 if order == "gray" else 3
    if d.size is not None:
        w, h = (d.size, d.size) if isinstance(d.size, int) else (d.size[0], d.size[1])
    elif size is not None:
        w = h = size
    w, h = _need(w, "input.size", path), _need(h, "input.size", path)
    try:
        return ImageInput(
            channels=1 if channels == 1 else 3,
            size=w,
            height=h if h != w else None,
            layout=layout,
            order="BGR" if order == "BGR" else "RGB",
            dtype=dtype,
            scale=d.scale,
            mean=d.mean or [0.0] * channels,
            std=d.std or [1.0] * channels,
            resize=d.resize or "stretch",
        )
    except ValueError as exc:
        raise _input_error(path, exc) from exc


def _audio_input(
    d: ModelInputConfig, dims: list[int | None], dtype: DType, path: Path
) -> AudioInput:
    n_mfcc = d.n_mfcc or (dims[1] if len(dims) == 3 else None)
    frames = d.frames or (dims[2] if len(dims) == 3 else None)
    try:
        return AudioInput(
            n_mfcc=_need(n_mfcc, "input.n_mfcc", path),
            frames=_need(frames, "input.frames", path),
            mean=d.mean,
            std=d.std,
            dtype=dtype,
            sample_rate=d.sample_rate or 16000,
            hop_length=d.hop_length or 512,
            n_fft=d.n_fft or 2048,
        )
    except ValueError as exc:
        raise _input_error(path, exc) from exc


def _series_input(
    d: ModelInputConfig, dims: list[int | None], dtype: DType, path: Path
) -> SeriesInput:
    flat = d.series_layout == "flat" if d.series_layout else len(dims) == 2
    channels: int | None = len(d.columns) if d.columns else None
    window: int | None
    if flat:
        window = d.window or 1
        features = dims[1] if len(dims) == 2 else None
        channels = channels or (features // window if features else None)
    else:
        channels = channels or (dims[1] if len(dims) == 3 else None)
        window = d.window or (dims[2] if len(dims) == 3 else None)
    try:
        return SeriesInput(
            channels=_need(channels, "input.columns", path),
            window=_need(window, "input.window", path),
            columns=d.columns,
            mean=d.mean,
            std=d.std,
            dtype=dtype,
            flat=flat,
        )
    except ValueError as exc:
        raise _input_error(path, exc) from exc


def _first_float_output(session: Any) -> str:
    outs = session.get_outputs()
    for o in outs:
        if o.type in ("tensor(float)", "tensor(double)", "tensor(float16)"):
            return str(o.name)
    return str(outs[0].name)


def build_head(out: ModelOutputConfig, spec: ModelSpec, session: Any, labels: list[str]) -> Head:
    """The head that reads a described output."""
    name = out.name or _first_float_output(session)
    if out.kind == "classifier":
        return ClassifierHead(name, labels, out.probabilities, out.top_k)
    if out.kind == "anomaly":
        return AnomalyScoreHead(name, spec.anomaly_threshold, out.anomaly_when == "below")
    if out.kind == "embedding":
        return EmbeddingHead(name, dict(out.examples), out.percentile)
    inp = spec.input
    size = (inp.width, inp.rows) if isinstance(inp, ImageInput) else (1, 1)
    return DetectorHead(
        labels,
        out.format,
        name,
        (out.boxes, out.scores, out.classes),
        out.score_threshold,
        out.iou_threshold,
        out.max_detections,
        out.objectness,
        out.box_order == "yxyx",
        out.normalized,
        size,
    )


__all__ = ["Description", "build_head", "describe_model"]
