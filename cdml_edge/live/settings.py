"""What a live watch is set to do, and cdmltrain 1.x's ``data_type`` names for modalities."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cdml_edge.intake.windower import WindowPolicy
from cdml_edge.modality import modality_for

MiB = 1024 * 1024

CDMLTRAIN_DATA_TYPES = {"binary": "unknown"}
"""Our modality -> cdmltrain 1.x's ``data_type`` where the names differ (the others are equal:
``image``, ``audio``, ``csv``, ``json``, ``text``; ``timeseries`` is ours alone)."""


def data_type(name: str) -> str:
    """cdmltrain 1.x's ``data_type`` of a file name.

    One of ``image`` | ``audio`` | ``csv`` | ``json`` | ``text`` | ``timeseries`` | ``unknown``.
    """
    modality = modality_for(name)
    return CDMLTRAIN_DATA_TYPES.get(modality, modality)


@dataclass(frozen=True)
class WatchSettings:
    """A watched folder, how its files are grouped into batches, and the bounds.

    ``max_inflight_bytes`` caps the bytes read and not yet finished (over it, files wait on
    disk); a file larger than ``window.max_bytes``, or than half of ``max_inflight_bytes``
    (what the budget holds of it), is never read and goes to quarantine, as do files that
    cannot be taken. ``quarantine_dir`` (default: ``.quarantine`` inside the folder, which
    the watch ignores) keeps at most ``quarantine_max_bytes``, oldest removed first.
    """

    folder: Path
    window: WindowPolicy
    auto_delete: bool = False
    patterns: tuple[str, ...] = ("*",)
    stable_seconds: float = 0.5
    polling: bool = False
    recursive: bool = False
    max_inflight_bytes: int = 256 * MiB
    quarantine_dir: Path | None = None
    quarantine_max_bytes: int = 64 * MiB
    name: str = "live"

    @property
    def quarantine(self) -> Path:
        """The quarantine folder: ``quarantine_dir``, or ``.quarantine`` inside the folder."""
        return self.quarantine_dir or self.folder / ".quarantine"
