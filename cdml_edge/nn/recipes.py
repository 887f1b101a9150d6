"""Training recipes: an archive of class folders in, a checkpoint with its ModelSpec out.

Used by ``cdml-edge train`` and ``scripts/demo/train_demo_models.py``. Items are decoded by
:mod:`cdml_edge.decode` and prepared by :func:`cdml_edge.model.spec.prepare_item`, the
same code the appliance runs, so training and serving see identical inputs.
:data:`RECIPES` holds, per modality, how the classifier's input is specified and fed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from cdml_edge.data.labels import LabelError
from cdml_edge.model.spec import (
    AudioInput,
    ImageInput,
    ModelInput,
    ModelSpec,
    SeriesInput,
    fit_input_stats,
)
from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.cda import AnomalyScorer, encode
from cdml_edge.nn.data import spec_dataset
from cdml_edge.nn.encoders import AudioEncoder, TimeSeriesEncoder
from cdml_edge.nn.loss import CDMLLoss
from cdml_edge.nn.plots import confusion_matrix, write_training_plots
from cdml_edge.nn.tier2 import CDMLTrainTier2
from cdml_edge.nn.train import CDMLTrainer, StepCallback


@dataclass
class TrainResult:
    """What :func:`train_from_archive` made: trainer, spec, last checkpoint, history, plots."""

    trainer: CDMLTrainer
    spec: ModelSpec
    checkpoint: Path
    classes: list[str]
    history: list[dict[str, Any]] = field(default_factory=list)
    scorer: AnomalyScorer | None = None
    plots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. a class val/ lacks


@dataclass(frozen=True)
class InputShape:
    """What the caller fixes of an input: image size and channels, MFCC parameters."""

    image_size: int = 32
    channels: int = 3
    audio: dict[str, int] | None = None


def _image_input(sample: np.ndarray | None, shape: InputShape) -> ModelInput:
    if shape.channels not in (1, 3):
        raise ValueError(f"channels: 1 (grey) or 3 (RGB), got {shape.channels}")
    c = shape.channels
    return ImageInput.model_validate(
        {"channels": c, "size": shape.image_size, "mean": [0.5] * c, "std": [0.5] * c}
    )


def _audio_input(sample: np.ndarray | None, shape: InputShape) -> ModelInput:
    if sample is None:
        raise ValueError("audio spec needs a decoded sample")
    return AudioInput.model_validate({**(shape.audio or {}), "frames": int(sample.shape[-1])})


def _series_input(sample: np.ndarray | None, shape: InputShape) -> ModelInput:
    if sample is None:
        raise ValueError("series spec needs a decoded sample")
    a = sample if sample.ndim == 2 else sample[:, None]
    return SeriesInput(channels=int(a.shape[1]), window=int(a.shape[0]))


@dataclass(frozen=True)
class InputRecipe:
    """How the classifier input of one modality is specified and fed.

    ``build(sample, shape)`` makes the input spec; where it reads its shape off a decoded
    ``sample``, ``probe`` is the input spec that sample is decoded with. ``in_memory``:
    items are decoded once into memory by default (small, or costly to decode: MFCC).
    """

    build: Callable[[np.ndarray | None, InputShape], ModelInput]
    probe: ModelInput | None = None
    in_memory: bool = False


RECIPES: Mapping[str, InputRecipe] = MappingProxyType(
    {
        "image": InputRecipe(_image_input),
        "audio": InputRecipe(_audio_input, probe=AudioInput(), in_memory=True),
        "csv": InputRecipe(_series_input, SeriesInput(channels=1, window=1), in_memory=True),
        "timeseries": InputRecipe(_series_input, SeriesInput(channels=1, window=1), in_memory=True),
    }
)
"""Modality -> :class:`InputRecipe`, for every modality a model scores."""


def _recipe(modality: str) -> InputRecipe:
    recipe = RECIPES.get(modality)
    if recipe is None:
        raise ValueError(f"cannot train on modality {modality!r}")
    return recipe


def _classifier(modality: str, name: str, inp: ModelInput) -> ModelSpec:
    return ModelSpec.model_validate(
        {"name": name, "modality": modality, "task": "classifier", "input": inp, "labels": ["?"]}
    )


def base_spec(
    modality: str,
    name: str,
    sample: np.ndarray | None,
    image_size: int = 32,
    channels: int = 3,
    audio: dict[str, int] | None = None,
) -> ModelSpec:
    """A classifier spec for ``modality``; audio/series shapes are read off ``sample``."""
    shape = InputShape(image_size, channels, audio)
    return _classifier(modality, name, _recipe(modality).build(sample, shape))


def build_for(spec: ModelSpec, num_classes: int, latent_dim: int | None = None) -> LatentModel:
    """The default model for a spec's input."""
    inp = spec.input
    if isinstance(inp, ImageInput):
        return CDMLTrainTier2(latent_dim or 64, num_classes, inp.channels, inp.size)
    if isinstance(inp, AudioInput):
        return AudioEncoder(inp.n_mfcc, inp.frames, latent_dim or 32, num_classes)
    return TimeSeriesEncoder(inp.channels, inp.window, latent_dim or 16, num_classes)


def materialize(ds: Dataset[Any]) -> TensorDataset:
    """Decode every item once into memory (for data whose decoding is costly, e.g. MFCC)."""
    items = [ds[i] for i in range(len(ds))]  # type: ignore[arg-type]
    return TensorDataset(torch.stack([x for x, _ in items]), torch.as_tensor([y for _, y in items]))


def _split(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    order = np.random.default_rng(seed).permutation(n)
    k = max(1, int(round(n * fraction)))
    return sorted(order[k:].tolist()), sorted(order[:k].tolist())


def train_from_archive(
    data: Any,
    modality: str,
    epochs: int,
    out_dir: str | Path,
    *,
    val_data: Any = None,
    name: str | None = None,
    version: str = "0.1.0",
    image_size: int = 32,
    channels: int = 3,
    latent_dim: int | None = None,
    batch_size: int = 64,
    lr: float = 2e-3,
    recon_weight: float = 1.0,
    val_fraction: float = 0.2,
    normal_label: str | None = None,
    quantile: float = 0.99,
    seed: int = 0,
    in_memory: bool | None = None,
    device: str = "auto",
    on_step: StepCallback | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    keep_all: bool = False,
) -> TrainResult:
    """Train a classifier (or, with ``normal_label``, an anomaly model) on class folders.

    Anomaly models are trained as classifiers first; then codes of the ``normal_label``
    class fit an :class:`AnomalyScorer` whose threshold is the ``quantile`` of the
    scores of held-out normal items.

    Long: cdmltrain 1.x's keyword arguments, one a line, then the few steps of a recipe.
    """
    torch.manual_seed(seed)
    parts, notes = split_export(data) if val_data is None else (None, [])
    select = {"include": "train/*"} if parts else {}
    spec, classes = _spec_from_data(
        data,
        modality,
        name or f"{modality}-model",
        version,
        InputShape(image_size, channels),
        select,
    )
    if normal_label is not None and normal_label not in classes:  # before any epoch runs
        raise LabelError(
            str(data),
            f"normal class (--anomaly-normal) {normal_label!r} is not a class folder; the "
            f"classes: {', '.join(classes)}",
        )
    if normal_label is None and len(classes) == 1:
        raise LabelError(
            str(data),
            f"one class folder, {classes[0]!r}: a classifier needs two or more; for an "
            f"anomaly model of normal data alone: --anomaly-normal {classes[0]}",
        )
    in_memory = _recipe(modality).in_memory if in_memory is None else in_memory
    if parts and "val" in parts:  # the export's own validation split
        val_data = _SplitPart(data, "val")
    train_ds, val_ds = _datasets(data, val_data, spec, val_fraction, seed, in_memory, select)
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True, generator=gen)
    val_loader = DataLoader(val_ds, batch_size=256)
    model = build_for(spec, len(classes), latent_dim)
    trainer = CDMLTrainer(
        model,
        lr=lr,
        device=device,
        loss=CDMLLoss(recon_weight=recon_weight),
        out_dir=out_dir,
        spec=spec,
        schedule="cosine",
        keep_all=keep_all,
    )
    history = trainer.fit(train_loader, val_loader, epochs, on_step=on_step, on_epoch=on_epoch)
    scorer = None
    if normal_label is not None:
        scorer, spec = _fit_anomaly(
            trainer, spec, classes, normal_label, train_ds, val_ds, quantile
        )
        trainer.spec = spec
        trainer.extra["anomaly"] = scorer.state()
        trainer.save_checkpoint()
    ckpt = trainer.last_checkpoint
    if ckpt is None:  # epochs == 0
        ckpt = trainer.save_checkpoint()
    confusion = confusion_matrix(trainer, val_loader, len(classes)) if history else None
    plots = write_training_plots(Path(out_dir), history, classes, confusion)
    return TrainResult(trainer, spec, ckpt, classes, history, scorer, plots, notes)


@dataclass(frozen=True)
class _SplitPart:
    """One split (``val``) of a split export, as validation data."""

    data: Any
    split: str


def split_export(data: Any) -> tuple[set[str] | None, list[str]]:
    """The splits of a split export (``train/<class>/...``, ``val/...``), and notes on it.

    ``(None, [])`` for an archive of class folders. A class in ``val/`` or ``test/`` but not
    in ``train/`` raises :class:`LabelError` naming it and the way out; one missing from
    ``val/`` or ``test/`` is a note.
    """
    from cdml_edge.archive import open_archive
    from cdml_edge.data.splits import classes_by_split, split_gaps

    with open_archive(data) as arc:
        by_split = classes_by_split(arc.names())
    if by_split is None:
        return None, []
    gaps = split_gaps(by_split)
    for gap in gaps:
        if gap.unlearnable:
            raise LabelError(str(data), gap.message())
    return set(by_split), [gap.message() for gap in gaps]


def _spec_from_data(
    data: Any,
    modality: str,
    name: str,
    version: str,
    shape: InputShape,
    select: Mapping[str, Any],
) -> tuple[ModelSpec, list[str]]:
    """The classifier spec for the class folders of ``data``, and the classes.

    Input shapes are read off the first item, normalisation measured on all of them.
    """
    recipe = _recipe(modality)
    probe_input = recipe.probe
    if probe_input is None:  # the input does not depend on the data
        probe_input = recipe.build(None, shape)
    probe = spec_dataset(data, _classifier(modality, "probe", probe_input), raw=True, **select)
    classes = list(probe.classes)
    _check_class_names(data, classes)
    spec = _classifier(modality, name, recipe.build(np.asarray(probe[0][0]), shape))
    spec = spec.model_copy(update={"labels": classes, "version": version})
    # a generator: image inputs have fixed statistics, so their items are not decoded here
    return fit_input_stats(spec, (np.asarray(probe[i][0]) for i in range(len(probe)))), classes


def _check_class_names(data: Any, classes: list[str]) -> None:
    """Refuse a class folder whose name is not UTF-8 text, before any epoch runs.

    Labels are stored in the checkpoint and the ONNX metadata as UTF-8; a raw byte of
    another encoding (kept by the archive reader as a lone surrogate) is shown as ``%XX``.
    """
    from cdml_edge.fsio import display_name

    for name in classes:
        shown = display_name(name)
        if shown != name:
            raise LabelError(
                str(data),
                f"class folder {shown!r} is not UTF-8 text (labels are stored as UTF-8 in "
                "the model): rename it and pack the archive again",
            )


def _datasets(
    data: Any,
    val_data: Any,
    spec: ModelSpec,
    val_fraction: float,
    seed: int,
    in_memory: bool,
    select: Mapping[str, Any],
) -> tuple[Dataset[Any], Dataset[Any]]:
    """Training and validation sets: ``val_data``, or a ``val_fraction`` split of ``data``."""
    full = spec_dataset(data, spec, classes=spec.labels, **select)
    if val_data is not None:
        train_ds: Dataset[Any] = full
        val_ds: Dataset[Any] = _validation_set(val_data, spec)
    else:
        tr_idx, va_idx = _split(len(full), val_fraction, seed)
        train_ds, val_ds = Subset(full, tr_idx), Subset(full, va_idx)
    if in_memory:
        return materialize(train_ds), materialize(val_ds)
    return train_ds, val_ds


def _validation_set(val_data: Any, spec: ModelSpec) -> Dataset[Any]:
    """``val_data`` labelled with the training classes (``spec.labels``).

    A class id then means the same class in both sets; a class the training data lacks is an
    error.
    """
    try:
        if isinstance(val_data, _SplitPart):
            return spec_dataset(
                val_data.data, spec, classes=spec.labels, include=f"{val_data.split}/*"
            )
        return spec_dataset(val_data, spec, classes=spec.labels)
    except LabelError as exc:
        raise LabelError(
            exc.where, f"{exc.reason}: validation data may only hold the training classes"
        ) from None


def _fit_anomaly(
    trainer: CDMLTrainer,
    spec: ModelSpec,
    classes: list[str],
    normal_label: str,
    train_ds: Dataset[Any],
    val_ds: Dataset[Any],
    quantile: float,
) -> tuple[AnomalyScorer, ModelSpec]:
    if normal_label not in classes:
        raise ValueError(f"normal label {normal_label!r} is not a class folder: {classes}")
    normal = classes.index(normal_label)
    z_tr, y_tr = encode(trainer.model, DataLoader(train_ds, batch_size=256), trainer.device)
    z_va, y_va = encode(trainer.model, DataLoader(val_ds, batch_size=256), trainer.device)
    assert y_tr is not None and y_va is not None
    calib = z_va[y_va == normal]
    scorer = AnomalyScorer.fit(
        z_tr[y_tr == normal], quantile, calibration=calib if len(calib) >= 10 else None
    )
    spec = spec.model_copy(
        update={
            "task": "anomaly",
            "anomaly_threshold": scorer.threshold,
            "outputs": ["anomaly", "latent"],
        }
    )
    return scorer, ModelSpec.model_validate(spec.model_dump())
