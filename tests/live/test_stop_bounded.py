"""``stop()`` on a watch whose callback blocks: a bounded wait, a warning, an exit that comes.

On real folders and real files; the blocking callback is released at the end of each test.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from helpers.live_runs import WatchProcess, drop, until

from cdml_edge import PackedBatch, watch_and_pack, watch_in_memory
from cdml_edge.live.watch import STOP_WAIT_S


def test_stop_returns_and_names_the_callback_still_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Default ``stop()`` waited for ever (``join(None)``) on a callback that never returns."""
    entered, release = threading.Event(), threading.Event()

    def stuck_model(path: str, kind: str) -> None:
        entered.set()
        release.wait(120)

    watch = watch_in_memory(tmp_path, stuck_model, background=True)
    returned: list[object] = []
    stopper = threading.Thread(target=lambda: returned.append(watch.stop()), daemon=True)
    try:
        drop(tmp_path, "a.txt", b"one")
        until(entered.is_set)
        with caplog.at_level(logging.WARNING, logger="cdml_edge.live"):
            stopper.start()
            stopper.join(STOP_WAIT_S + 60)
        assert not stopper.is_alive(), "stop() did not return while the callback blocked"
        assert returned and watch._worker.daemon
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("stuck_model" in m and "still running" in m for m in warned), warned
        assert any("stuck_model" in e for e in watch.stats.errors), watch.stats.errors
    finally:
        release.set()
    until(lambda: not watch._worker.is_alive())
    assert (tmp_path / "a.txt").read_bytes() == b"one"  # never auto-deleted: it stays


def test_one_ctrl_c_ends_a_blocking_watch_whose_callback_blocks(tmp_path: Path) -> None:
    """The reviewer's repro: one Ctrl-C, and the program ends with a warning, not a hang."""
    code = (
        "import time\n"
        "from cdml_edge.live import watch_in_memory\n"
        "def stuck(p, t):\n"
        "    print('in callback', flush=True)\n"
        "    time.sleep(1e9)\n"
        "print('ready', flush=True)\n"
        f"w = watch_in_memory({str(tmp_path)!r}, stuck, duration=300)\n"
        "print('returned', w.stats.files, flush=True)\n"
    )
    with WatchProcess(code) as proc:
        assert proc.line() == "ready"
        drop(tmp_path, "a.txt", b"one")
        assert proc.line() == "in callback"
        out, err = proc.interrupt(timeout=STOP_WAIT_S + 60)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["returned 0"]
    assert "stuck" in err and "still running" in err, err


def test_nothing_is_deleted_after_stop_gave_up_on_the_callback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is deleted once stop() gave up on the callback.

    ``auto_delete`` deleted a batch's files (and its archive) when a callback that stop() had
    given up on returned later: files never confirmed processed within the stop.
    """
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    entered, release = threading.Event(), threading.Event()
    calls: list[list[str]] = []

    def slow_model(batch: PackedBatch) -> None:
        calls.append([p.name for p in batch.files])
        entered.set()
        release.wait(120)

    watch = watch_and_pack(
        inp, out, slow_model, interval_seconds=0.2, auto_delete=True, background=True
    )
    try:
        drop(inp, "a.txt", b"one")
        until(entered.is_set)
        drop(inp, "b.txt", b"two")  # taken, in a batch queued behind the blocked one
        until(lambda: watch.source.stats.taken == 2)
        with caplog.at_level(logging.WARNING, logger="cdml_edge.live"):
            stats = watch.stop(timeout=0.5)
            assert watch._worker.is_alive()  # stop gave up
            release.set()
            until(lambda: not watch._worker.is_alive())
    finally:
        release.set()
    assert (inp / "a.txt").read_bytes() == b"one" and (inp / "b.txt").read_bytes() == b"two"
    assert len(list(out.iterdir())) == 1  # the blocked batch's archive stays too
    assert calls == [["a.txt"]]  # the batch queued behind was not handed over after stop
    assert (stats.deleted, stats.files, stats.abandoned) == (0, 0, 2), stats
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("slow_model" in m and "returned after stop" in m for m in warned), warned


def test_in_memory_file_stays_when_its_callback_returns_after_stop_gave_up(
    tmp_path: Path,
) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(path: str, kind: str) -> None:
        entered.set()
        release.wait(120)

    watch = watch_in_memory(tmp_path, stuck, auto_delete=True, background=True)
    try:
        drop(tmp_path, "a.txt", b"one")
        until(entered.is_set)
        watch.stop(timeout=0.2)
    finally:
        release.set()
    until(lambda: not watch._worker.is_alive())
    assert (tmp_path / "a.txt").read_bytes() == b"one"
    assert (watch.stats.deleted, watch.stats.abandoned) == (0, 1)
    assert any("returned after stop" in e for e in watch.stats.errors), watch.stats.errors
