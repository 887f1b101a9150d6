"""What the ring keeps and what it evicts first: the keep policy and the bounds' order.

``retention.keep`` decides per scored window: ``all``, ``anomalies`` (windows with at least
one anomaly), ``sample`` (a deterministic ``sample_percent`` of window ids) or ``none``.
The bounds evict oldest first: windows by close time, quarantined files by mtime, until the
ring with the incoming window fits ``max_bytes`` and nothing is older than ``max_age``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from cdml_edge.store.catalog import WindowRecord
from cdml_edge.window.manifest import WindowManifest

KeepPolicy = Literal["all", "anomalies", "sample", "none"]


def sample_hit(window_id: str, percent: float) -> bool:
    """Deterministic sampling: the same window id is always in or out."""
    if percent >= 100:
        return True
    if percent <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(window_id.encode()).digest()[:8], "big")
    return (h % 1_000_000) < percent * 10_000


def keeps(keep: KeepPolicy, sample_percent: float, manifest: WindowManifest) -> bool:
    """Whether the keep policy keeps this (scored) window."""
    if keep == "all":
        return True
    if keep == "none":
        return False
    if keep == "anomalies":
        return manifest.anomalies > 0
    return sample_hit(manifest.window_id, sample_percent)


def eviction_order(
    records: Sequence[WindowRecord],
    quarantined: Sequence[tuple[float, Path, int]],
    *,
    incoming: int,
    max_bytes: int,
    cutoff: float | None,
) -> list[WindowRecord | Path]:
    """The windows and quarantined files (``(mtime, path, size)``) to evict, oldest first.

    Eviction stops at the first entry that is not older than ``cutoff`` once the rest plus
    ``incoming`` bytes fit in ``max_bytes``.
    """
    total = sum(r.bytes for r in records) + sum(q[2] for q in quarantined)
    order: list[tuple[float, WindowRecord | Path, int]] = [
        (r.closed_at, r, r.bytes) for r in records
    ]
    order += [(mtime, path, size) for mtime, path, size in quarantined]
    order.sort(key=lambda e: e[0])
    out: list[WindowRecord | Path] = []
    for t, what, size in order:  # oldest first
        expired = cutoff is not None and t < cutoff
        if not expired and total + incoming <= max_bytes:
            break
        out.append(what)
        total -= size
    return out
