"""``stop()`` on a watch whose callback blocks: a bounded wait, a warning, an exit that comes.

On real folders and real files; the blocking callback is released at the end of each test.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdml_edge import watch_in_memory
from cdml_edge.live.watch import STOP_WAIT_S


def _until(cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.05)


def _drop(folder: Path, name: str, data: bytes) -> Path:
    tmp = folder / f"{name}.part"
    tmp.write_bytes(data)
    os.replace(tmp, folder / name)
    return folder / name


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
        _drop(tmp_path, "a.txt", b"one")
        _until(entered.is_set)
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
    _until(lambda: not watch._worker.is_alive())
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
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        _drop(tmp_path, "a.txt", b"one")
        assert proc.stdout.readline().strip() == "in callback"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=STOP_WAIT_S + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["returned 0"]
    assert "stuck" in err and "still running" in err, err
