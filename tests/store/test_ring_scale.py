"""A large ring: what opening it costs in memory when its catalog must be rebuilt."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from helpers.retention_data import make_window

from cdml_edge.store.catalog import CATALOG_NAME
from cdml_edge.store.ondisk import read_regular
from cdml_edge.store.retention import RetentionRing
from cdml_edge.store.sidecar import SIDECAR_MAX_BYTES

T0 = 1_790_000_000.0


def _ring(path: Path, windows: int, items: int = 16) -> None:
    ring = RetentionRing(path, max_bytes=10**10, fsync=False)
    files = [(f"frame_{i:04d}.png", bytes([i]) * 64) for i in range(items)]
    for w in range(windows):
        archive, m = make_window(
            f"cam1-w{w:06d}", T0 + w, files, labels=["ok"] * items, anomaly_scores=[0.1] * items
        )
        assert ring.store(archive, m).stored
    ring.close()


def _peak_while_opening(path: Path) -> int:
    tracemalloc.start()
    try:
        ring = RetentionRing(path, max_bytes=10**10, fsync=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ring.catalog.count() == len(ring.windows())
    ring.close()
    return peak


def test_rebuilding_the_catalog_holds_one_window_at_a_time(tmp_path: Path) -> None:
    """A lost catalog (or an old schema) is rebuilt from the sidecars when the ring opens.

    Every window's manifest used to be held until the last sidecar was read: about 70 KiB a
    window of 16 items, so a ring of 100,000 small windows took gigabytes on a board; and
    each sidecar read asked for a 64 MiB buffer.
    """
    _ring(tmp_path / "ring", 400)
    (tmp_path / "ring" / CATALOG_NAME).unlink()
    peak = _peak_while_opening(tmp_path / "ring")
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB to open a ring of 400 windows"


def test_a_small_file_is_read_without_a_buffer_of_the_bound(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_bytes(b"{}" * 100)
    tracemalloc.start()
    try:
        data = read_regular(tmp_path / "s.json", SIDECAR_MAX_BYTES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == b"{}" * 100 and peak < 2**20


def test_storing_into_a_large_ring_does_not_read_the_whole_catalog(tmp_path: Path) -> None:
    """Each store used to read every catalog row (to pick what to evict): O(windows) each.

    At 2,000 windows that was half of a store's time; a ring of 100,000 small windows
    spent about a second per window on it. Now only the oldest rows are read, in batches.
    """
    _ring(tmp_path / "ring", 500, items=1)
    ring = RetentionRing(tmp_path / "ring", max_bytes=10**10, fsync=False)
    archive, m = make_window("cam1-new", T0 + 10**6, [("n.png", b"n" * 64)], labels=["ok"])
    tracemalloc.start()
    try:
        assert ring.store(archive, m).stored
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ring.close()
    assert peak < 160 * 1024, f"{peak / 1024:.0f} KiB to store one window beside 500"


def test_eviction_walks_the_oldest_windows_in_archive_order(tmp_path: Path) -> None:
    _ring(tmp_path / "ring", 300, items=1)
    ring = RetentionRing(tmp_path / "ring", max_bytes=10**10, fsync=False)
    all_ids = [r.window_id for r in ring.windows()]
    assert [r.window_id for r in ring.catalog.oldest(batch=7)] == all_ids
    ring.max_bytes = ring.stats()["bytes"] // 2 + ring.stats()["catalog_bytes"]
    evicted = ring.evict()  # more than a batch of rows at once
    assert evicted == 150 and [r.window_id for r in ring.windows()] == all_ids[150:]
    ring.close()
