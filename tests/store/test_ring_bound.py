"""``retention.max_bytes`` holds after every store: the catalog's own growth counted too.

A window's catalog rows (one per item) are added after the window's files are written, and
SQLite takes whole pages for them: the room made before the write did not count them, so a
ring of windows with many items ended a page or more over its bound after a store. And a
window that fit ``max_bytes`` alone, but not beside the catalog, was stored anyway after
evicting everything else. Measured here as the disk sees it: every file under the ring in
the blocks the file system gives it.
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.retention_data import make_window

from cdml_edge.fsio import on_disk
from cdml_edge.store.retention import RetentionRing, StoreStatus

T0 = 1_790_000_000.0


def _disk_space(folder: Path, block: int) -> int:
    """Every file under ``folder``: its blocks as reported, at least its length in blocks."""
    total = 0
    for p in folder.rglob("*"):
        st = p.lstat()
        if p.is_file():
            total += max(on_disk(st.st_size, block), st.st_blocks * 512)
    return total


def _window(i: int, items: int) -> tuple[bytes, object]:
    files = [(f"img{i}_{k}.png", os.urandom(100)) for k in range(items)]
    return make_window(f"w{i:03d}", T0 + i, files, labels=["ok"] * items)


def test_the_ring_stays_within_max_bytes_after_every_store(tmp_path: Path) -> None:
    """Windows of 50 items: the catalog grows by pages as their rows come in."""
    bound = 200_000
    ring = RetentionRing(tmp_path / "ring", max_bytes=bound, fsync=False)
    over = []
    for i in range(40):
        archive, manifest = _window(i, 50)
        res = ring.store(archive, manifest)  # type: ignore[arg-type]
        assert res.stored, res.error
        used = _disk_space(tmp_path / "ring", ring.block)
        stats = ring.stats()
        counted = stats["bytes"] + stats["catalog_bytes"]
        if max(used, counted) > bound:
            over.append((i, used, counted))
    assert over == [], f"over {bound} B after these stores (window, on the disk, counted): {over}"
    assert ring.counters["evicted"] > 0  # the bound was reached, and held
    ring.close()


def test_a_window_that_fits_only_without_the_catalog_is_too_large(tmp_path: Path) -> None:
    """The bound holds the catalog: a window that needs the room the catalog takes is refused.

    It used to be stored after every other window was evicted, the ring then over its bound
    by up to the catalog's size (about 40 KiB fresh).
    """
    ring = RetentionRing(tmp_path / "ring", max_bytes=10**7, fsync=False)
    assert ring.store(*_window(0, 1)).stored  # type: ignore[arg-type]
    one = ring.windows()[0].bytes
    ring.close()
    tight = RetentionRing(tmp_path / "tight", max_bytes=10**7, fsync=False)
    catalog = tight.stats()["catalog_bytes"]
    assert catalog > 0
    # room for the window alone and for the catalog alone, not for both
    tight.max_bytes = bound = one + catalog - tight.block
    res = tight.store(*_window(1, 1))  # type: ignore[arg-type]
    assert res.status is StoreStatus.TOO_LARGE and res.error is not None
    assert f"{one} B on the disk" in res.error
    assert f"B of catalog > retention.max_bytes ({bound})" in res.error
    assert tight.windows() == []
    assert _disk_space(tmp_path / "tight", tight.block) <= bound
    tight.close()
