"""Window members -> the pieces a model scores: a whole item, or one row range of a series."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from cdml_edge.decode import DecodeError
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.inputs import MODEL_INPUTS
from cdml_edge.window.manifest import ManifestItem


@dataclass
class Piece:
    """One unit the model scores: a whole item or one segment of a series."""

    item: ManifestItem
    modality: str
    suffix: str  # "" for a whole item, "#rows=0-255" for a segment
    array: np.ndarray | None  # prepared model input; None when the modality has no model


def item_pieces(
    item: ManifestItem,
    modality: str,
    data: bytes,
    runner: ModelRunner | None,
    segment_rows: int | None,
) -> list[Piece]:
    """Decode one member for ``runner`` (``None``: no model) and prepare its model input(s).

    A series longer than ``segment_rows`` rows becomes one piece per row range. Raises
    :class:`~cdml_edge.decode.DecodeError` (or ``ModelSpecError`` from preparing) on a bad
    member.
    """
    entry = MODEL_INPUTS.get(modality)
    if entry is None:
        raise DecodeError(item.name, f"no decoder for modality {modality!r}")
    decoded = entry.decode(data, item.name, runner.spec.input if runner is not None else None)
    if decoded is None:  # checked only: no model takes this modality
        return [Piece(item, modality, "", None)]
    if not entry.segmented or segment_rows is None or decoded.shape[0] <= segment_rows:
        return [Piece(item, modality, "", _prepare(runner, decoded))]
    return [
        Piece(item, modality, suffix, _prepare(runner, seg))
        for suffix, seg in _segments(decoded, segment_rows)
    ]


def _prepare(runner: ModelRunner | None, array: np.ndarray) -> np.ndarray | None:
    return runner.prepare(array) if runner is not None else None


def _segments(table: np.ndarray, rows: int) -> Iterator[tuple[str, np.ndarray]]:
    """``("#rows=a-b", rows a..b)`` for consecutive ranges of ``rows`` rows."""
    for start in range(0, table.shape[0], rows):
        seg = table[start : start + rows]
        yield f"#rows={start}-{start + seg.shape[0] - 1}", seg
