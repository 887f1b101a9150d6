"""The live API fed what a factory floor drops into a folder, on real folders and files.

A name that is not UTF-8, a FIFO, links (to a secret outside, dangling), a folder, a file
still being written, a callback that fails on one file: the watch goes on, hands over what is
complete, leaves the rest where it is and counts it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cdml_edge import LiveBatchLoader, PackedBatch, watch_and_pack, watch_in_memory


def _until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.05)


def test_odd_entries_are_left_and_counted_while_good_files_flow(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    (tmp_path / "secret.txt").write_text("do not read")
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_file(path: str, kind: str) -> None:
        with lock:
            seen.append((path, kind))
        if path.endswith("boom.txt"):
            raise RuntimeError("the model choked on this one")

    watch = watch_in_memory(inp, on_file, auto_delete=True, stable_seconds=0.3, background=True)
    try:
        os.mkfifo(inp / "fifo.txt")
        os.symlink(tmp_path / "secret.txt", inp / "link.txt")
        os.symlink(tmp_path / "nowhere", inp / "dangling.txt")
        (inp / "sub").mkdir()
        (inp / "boom.txt").write_text("b")
        with open(os.fsencode(inp) + b"/caf\xe9.txt", "wb") as fh:  # Latin-1, not UTF-8
            fh.write(b"latin")
        with open(inp / "slow.txt", "wb") as fh:  # written in pieces, no rename
            for _ in range(8):
                fh.write(b"x" * 100)
                fh.flush()
                time.sleep(0.1)
        (inp / "last.txt").write_text("ok")
        _until(lambda: watch.stats.files == 3 and watch.stats.callback_errors == 1)
        assert watch.running
    finally:
        stats = watch.stop()
    names = sorted(os.fsencode(p).rsplit(b"/", 1)[1] for p, _ in seen)
    assert names == [b"boom.txt", b"caf\xe9.txt", b"last.txt", b"slow.txt"]
    assert stats.input_errors == 3 and stats.deleted == 3  # fifo, two links; not boom.txt
    left = sorted(os.listdir(inp))
    assert left == ["boom.txt", "dangling.txt", "fifo.txt", "link.txt", "sub"]
    assert (tmp_path / "secret.txt").read_text() == "do not read"


def test_a_file_still_being_written_is_packed_whole(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    batches: list[PackedBatch] = []
    watch = watch_and_pack(
        inp, None, batches.append, interval_seconds=0.3, stable_seconds=0.5, background=True
    )
    try:
        with open(inp / "log.csv", "wb") as fh:  # a logger appending, pausing under 0.5 s
            for i in range(10):
                fh.write(f"{i},{i * i}\n".encode())
                fh.flush()
                time.sleep(0.15)
        _until(lambda: watch.stats.files == 1)
    finally:
        watch.stop()
    assert len(batches) == 1
    live = LiveBatchLoader(batches[0])
    assert live.names == ["log.csv"]
    assert live.read("log.csv") == b"".join(f"{i},{i * i}\n".encode() for i in range(10))


def _immutable(path: Path, on: bool) -> bool:
    """``chattr +i`` (root with CAP_LINUX_IMMUTABLE, on ext4/xfs/tmpfs...); False if refused."""
    flag = "+i" if on else "-i"
    try:
        done = subprocess.run(["chattr", flag, str(path)], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_an_input_auto_delete_cannot_delete_is_counted(tmp_path: Path) -> None:
    """A file the watch may read but not delete (immutable, a read-only share): in the stats."""
    inp = tmp_path / "in"
    inp.mkdir()
    stuck = inp / "stuck.txt"
    stuck.write_text("s")
    if not _immutable(stuck, True):
        pytest.skip("chattr +i is not allowed here (needs root and CAP_LINUX_IMMUTABLE)")
    try:
        watch = watch_in_memory(
            inp, lambda p, t: None, auto_delete=True, stable_seconds=0.2, background=True
        )
        try:
            (inp / "fine.txt").write_text("f")
            _until(lambda: watch.stats.files == 2)
        finally:
            stats = watch.stop()
    finally:
        _immutable(stuck, False)
    assert stats.deleted == 1 and stats.delete_errors == 1, stats
    assert any("stuck.txt" in e and "not deleted" in e for e in stats.errors), stats.errors
    assert stuck.exists() and not (inp / "fine.txt").exists()
