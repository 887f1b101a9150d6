"""Two different files with the same name, size and mtime get different result ids.

Before, ``id`` hashed source, name, size and mtime only: a file copied with its mtime
(``cp -p``, ``rsync -a``, unzip) or a camera writing fixed-size frames under one name on a
file system with coarse times (FAT: 2 s) gave two different files the same id, and a
subscriber deduping on it, as docs/mqtt.md says to, dropped the second, real result.
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.agent_runs import jpeg, wait_for
from helpers.source_sinks import Sink

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.payloads import item_id


def test_same_name_size_and_mtime_with_other_bytes_is_another_id(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    a, b = jpeg(10), jpeg(200)
    assert len(a) == len(b) and a != b
    sink = Sink()
    spec = FolderSpec(
        name="cam", path=inbox, modality="image", patterns=("*.jpg",), stable_seconds=0.1
    )
    src = FolderSource(spec, ByteBudget(10**8), sink, sink.error)
    src.start()
    try:
        for n, data in enumerate((a, b)):
            part = inbox / "frame.jpg.tmp"
            part.write_bytes(data)
            os.utime(part, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
            os.replace(part, inbox / "frame.jpg")  # the same name, size and mtime
            wait_for(lambda n=n: len(sink.items) == n + 1, what=f"take {n + 1}")
            src.release(inbox / "frame.jpg", keep=False)  # as its window's on_done would
            (inbox / "frame.jpg").unlink()
    finally:
        src.stop()
    first, second = sink.items
    assert first.item_id != second.item_id
    stamp = 1_700_000_000_000_000_000
    assert first.item_id == item_id("cam", "frame.jpg", len(a), stamp, content=a)


def test_the_same_bytes_keep_their_id() -> None:
    data = jpeg(10)
    stamp = 1_700_000_000_000_000_000
    one = item_id("cam", "frame.jpg", len(data), stamp, content=data)
    assert one == item_id("cam", "frame.jpg", len(data), stamp, content=bytes(data))
