"""Folders under the ring's file names are not the ring's: never removed, moved or read."""

from __future__ import annotations

import os
from pathlib import Path

from helpers.retention_data import make_window

from cdml_edge.store.retention import RetentionRing
from cdml_edge.store.sidecar import scan_retained

T0 = 1_790_000_000.0
STEM = "20261202T163000.123Z_cam1-w9"


def _ring(path: Path) -> RetentionRing:
    ring = RetentionRing(path, max_bytes=10**7, fsync=False)
    assert ring.store(*make_window("w1", T0, [("a.png", b"x" * 100)], labels=["ok"])).stored
    return ring


def test_a_folder_under_an_archive_name_does_not_stop_the_ring(tmp_path: Path) -> None:
    """An archive unzipped beside itself into a folder of its name, in a copied ring.

    Opening the ring used to take it for an archive whose sidecar never landed and remove
    it: ``IsADirectoryError`` out of the constructor, and the agent did not start.
    """
    d = tmp_path / "ring"
    _ring(d).close()
    made = [f"{STEM}.zip", f".tmp-{STEM}.tar.zst", f"{STEM}.window.json"]
    for name in made:
        (d / name).mkdir()
        (d / name / "notes.txt").write_text("mine")
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    assert [r.window_id for r in ring.windows()] == ["w1"]
    assert ring.foreign == sorted(made) and ring.stats()["corrupt"] == 0
    for name in made:  # left where they were, with what they hold
        assert (d / name / "notes.txt").read_text() == "mine"
    assert not os.path.exists(d / "corrupt")
    ring.close()
    listing = scan_retained(d)
    assert [r.window_id for r in listing.records] == ["w1"] and listing.skipped == []
