"""Modality of a member, from its file extension."""

from __future__ import annotations

import posixpath
from typing import Final

MODALITIES: Final = ("image", "audio", "csv", "timeseries", "json", "text", "binary")

EXTENSIONS: Final[dict[str, tuple[str, ...]]] = {
    "image": (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"),
    "audio": (".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"),
    "csv": (".csv", ".tsv"),
    "timeseries": (".npy", ".npz"),
    "json": (".json", ".jsonl", ".ndjson"),
    "text": (".txt", ".log", ".md"),
}

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
