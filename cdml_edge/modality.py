"""The one list of modalities: their names, file extensions and default source patterns.

Behaviour per modality is a table over these names, one per layer:
``decode.DECODERS`` (bytes -> value), ``model.spec.INPUT_KIND`` (the input a model takes),
``window.inputs.MODEL_INPUTS`` (bytes -> model input, warm-up sample),
``data.samples.SAMPLES`` (value -> dataset sample) and ``nn.recipes.RECIPES`` (training).

>>> modality_for("cam/0001.JPG")
'image'
>>> default_patterns("csv")
('*.csv', '*.tsv', '*.CSV', '*.TSV')
"""

from __future__ import annotations

import posixpath
from typing import Final, Literal, get_args

ModelModality = Literal["image", "audio", "csv", "timeseries"]
"""What a model can score (the ``modality`` of a :class:`~cdml_edge.model.spec.ModelSpec`)."""
SourceModality = Literal[ModelModality, "json", "text"]
"""What a configured source produces (``sources[].modality`` in ``factory.yaml``)."""
Modality = Literal[SourceModality, "binary"]
"""Any member of an archive; ``binary`` is a member of no known extension."""

MODALITIES: Final[tuple[Modality, ...]] = get_args(Modality)
SOURCE_MODALITIES: Final[tuple[SourceModality, ...]] = get_args(SourceModality)
MODEL_MODALITIES: Final[tuple[ModelModality, ...]] = get_args(ModelModality)

EXTENSIONS: Final[dict[str, tuple[str, ...]]] = {
    "image": (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"),
    "audio": (".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"),
    "csv": (".csv", ".tsv"),
    "timeseries": (".npy", ".npz"),
    "json": (".json", ".jsonl", ".ndjson"),
    "text": (".txt", ".log", ".md"),
}
"""Lower-case extensions per modality; a member of none of them is ``binary``."""

# extensions a folder source of the modality also takes (a time series may come as CSV)
_ALSO_TAKES: Final[dict[str, tuple[str, ...]]] = {"timeseries": EXTENSIONS["csv"]}

_BY_EXT: Final = {ext: mod for mod, exts in EXTENSIONS.items() for ext in exts}


def modality_for(name: str) -> str:
    """``image`` | ``audio`` | ``csv`` | ``timeseries`` | ``json`` | ``text`` | ``binary``."""
    ext = posixpath.splitext(name.lower())[1]
    return _BY_EXT.get(ext, "binary")


def check_modality(modality: str) -> str:
    """Return ``modality`` if it is known, else raise ``ValueError``."""
    if modality not in MODALITIES:
        raise ValueError(f"unknown modality {modality!r}; expected one of {', '.join(MODALITIES)}")
    return modality


SERIES_MODALITIES: Final[frozenset[str]] = frozenset({"csv", "timeseries"})
"""Modalities that are both a series of numbers: a model of one scores items of the other."""


def model_fits(model: str, items: str) -> bool:
    """Whether a model of modality ``model`` may score items of modality ``items``.

    The one rule ``config validate``, ``doctor``, ``run`` and the calibration examples apply:
    the same modality, or ``csv`` and ``timeseries`` for each other.

    >>> model_fits("timeseries", "csv"), model_fits("image", "audio")
    (True, False)
    """
    return model == items or {model, items} <= SERIES_MODALITIES


def items_for(model: str) -> frozenset[str]:
    """The item modalities a model of modality ``model`` scores (see :func:`model_fits`)."""
    return frozenset(m for m in MODALITIES if model_fits(model, m))


def default_patterns(modality: str) -> tuple[str, ...]:
    """Glob patterns a folder source of ``modality`` takes when none are configured.

    The modality's extensions in lower and upper case; ``("*",)`` for one without any.
    """
    exts = [*EXTENSIONS.get(modality, ()), *_ALSO_TAKES.get(modality, ())]
    pats = [f"*{e}" for e in exts] + [f"*{e.upper()}" for e in exts]
    return tuple(pats) or ("*",)


__all__ = [
    "EXTENSIONS",
    "MODALITIES",
    "MODEL_MODALITIES",
    "SERIES_MODALITIES",
    "SOURCE_MODALITIES",
    "Modality",
    "ModelModality",
    "SourceModality",
    "check_modality",
    "default_patterns",
    "items_for",
    "model_fits",
    "modality_for",
]
