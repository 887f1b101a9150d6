"""What the ring keeps and what it evicts first: the keep policy and the bounds' order.

``retention.keep`` decides per scored window: ``all``, ``anomalies`` (windows with at least
one anomaly), ``sample`` (a deterministic ``sample_percent`` of window ids) or ``none``.
The bounds evict oldest first: windows by close time, quarantined files by mtime, until the
ring with the incoming window fits ``max_bytes`` and nothing is older than ``max_age``.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator, Sequence
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


def evictions(
    oldest: Iterable[WindowRecord],
    quarantined: Sequence[tuple[float, Path, int]],
    *,
    total: int,
    incoming: int,
    max_bytes: int,
    cutoff: float | None,
) -> Iterator[WindowRecord | Path]:
    """The windows and quarantined files (``(mtime, path, size)``) to evict, oldest first.

    ``oldest``: the windows by close time, read only as far as they are evicted (and one
    more), so a large ring is not read whole for each window stored; ``total``: the bytes of
    every window and quarantined file. A window comes before a quarantined file of the same
    time. Eviction stops at the first entry that is not older than ``cutoff`` once the rest
    plus ``incoming`` bytes fit in ``max_bytes``.
    """
    windows = ((r.closed_at, r, r.bytes) for r in oldest)
    files = sorted(((t, p, n) for t, p, n in quarantined), key=lambda e: e[0])
    entries: Iterator[tuple[float, WindowRecord | Path, int]] = heapq.merge(
        windows, files, key=lambda e: e[0]
    )
    for t, what, size in entries:  # oldest first
        expired = cutoff is not None and t < cutoff
        if not expired and total + incoming <= max_bytes:
            return
        yield what
        total -= size
