"""A full disk while the ring is at its bound: the window that must evict to fit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.full_disk import fill, small_tmpfs
from helpers.retention_data import make_window

from cdml_edge.store.retention import RetentionRing, StoreStatus
from cdml_edge.window.manifest import WindowManifest

T0 = 1_790_000_000.0


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tiny", "512k") as mnt:
        yield mnt


def _window(i: int) -> tuple[bytes, WindowManifest]:
    return make_window(f"w{i}", T0 + i, [(f"a{i}.png", os.urandom(5000))], labels=["ok"])


def test_a_full_disk_that_stops_an_eviction_is_a_disk_full_episode(tiny_fs: Path) -> None:
    """SQLite needs room for its journal to delete a row: the eviction fails first.

    That failure used to escape as ``failed`` with a traceback for every window, without the
    ``retention_disk_full`` event; and the evicted window's files were deleted though its
    row stayed, so the catalog counted a window that was gone and the new one was not kept.
    """
    events: list[str] = []
    ring = RetentionRing(
        tiny_fs / "ring", max_bytes=64 * 1024, retry_s=0, on_event=lambda k, i: events.append(k)
    )
    for i in range(6):  # at its bound: each new window evicts the oldest
        assert ring.store(*_window(i)).stored
    assert ring.stats()["evicted"] > 0
    before = sorted(os.listdir(tiny_fs / "ring"))
    fill(tiny_fs)
    results = [ring.store(*_window(i)) for i in range(6, 9)]
    assert [r.status for r in results] == [StoreStatus.DISK_FULL] * 3
    assert results[0].event == "retention_disk_full" and events == ["retention_disk_full"]
    assert ring.stats()["disk_full"] == 3 and ring.stats()["failed"] == 0
    assert sorted(os.listdir(tiny_fs / "ring")) == before  # nothing lost for a window not kept
    on_disk = {n.split(".window.json")[0] for n in before if n.endswith(".window.json")}
    assert {r.sidecar.split(".window.json")[0] for r in ring.windows()} == on_disk
    (tiny_fs / "filler").unlink()
    again = ring.store(*_window(99))
    assert again.stored and again.event == "retention_disk_ok"
    ring.close()
