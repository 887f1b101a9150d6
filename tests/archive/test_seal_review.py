"""Hostile tests of the copies sealed behind their first reader (:mod:`cdml_edge.archive.sealing`).

Processes that exit or fork while a seal is under way, and the header walk made while a
plain copy is written compared with the walk of the copy.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdml_edge.archive import open_archive, sealing
from cdml_edge.archive.sealing import SEALED, is_sealed, wait_sealed
from cdml_edge.archive.seekable_cache import SeekableCache

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd CLI")


def _stock(tmp: Path, n: int = 20) -> Path:
    src = tmp / "tree"
    rnd = __import__("random").Random(n)
    for i in range(n):
        f = src / f"d{i % 3}" / f"{i:03d}.bin"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(rnd.randbytes(rnd.randrange(0, 30_000)))
    out = tmp / "stock.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
    return out


def _open_in_child(path: str, cache: str) -> None:
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # a large copy: its fsync takes a while
        if threading.current_thread().name == "seal-copy":
            time.sleep(0.5)
        real_fsync(fd)

    sealing.os.fsync = slow_fsync  # type: ignore[attr-defined]
    archive = open_archive(path, seekable_cache=SeekableCache(cache))
    assert archive.names()


def test_copy_made_in_a_forked_worker_is_sealed_when_it_exits(tmp_path: Path) -> None:
    """A DataLoader worker (multiprocessing, fork) that makes a copy and ends must seal it.

    Such a process leaves by ``os._exit``: no ``atexit`` handler runs in it.
    """
    path = _stock(tmp_path)
    cache = tmp_path / "cache"
    proc = multiprocessing.get_context("fork").Process(
        target=_open_in_child, args=(str(path), str(cache))
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    (copy,) = [p for p in cache.iterdir() if p.name.endswith(".tar")]
    assert stat.S_IMODE(copy.stat().st_mode) == SEALED


def test_script_that_exits_right_after_opening_leaves_its_copy_sealed(tmp_path: Path) -> None:
    path = _stock(tmp_path)
    cache = tmp_path / "cache"
    code = (
        "import os, sys, threading, time\n"
        "from cdml_edge.archive import open_archive, sealing\n"
        "from cdml_edge.archive.seekable_cache import SeekableCache\n"
        "real = os.fsync\n"
        "def slow(fd):\n"
        "    if threading.current_thread().name == 'seal-copy': time.sleep(0.5)\n"
        "    real(fd)\n"
        "os.fsync = slow\n"
        "a = open_archive(sys.argv[1], seekable_cache=SeekableCache(sys.argv[2]))\n"
        "assert a.names()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", code, str(path), str(cache)], check=True, env=env)
    (copy,) = [p for p in cache.iterdir() if p.name.endswith(".tar")]
    assert stat.S_IMODE(copy.stat().st_mode) == SEALED


def test_fork_while_a_seal_holds_its_lock_leaves_the_child_usable(tmp_path: Path) -> None:
    """A fork while the seal thread holds the module lock leaves the child usable.

    The seal thread takes the lock in its last step; a fork then must not leave the child's
    lock held forever (its first ``is_sealed`` would hang).
    """
    probe = tmp_path / "f"
    probe.write_bytes(b"x")
    held, release = threading.Event(), threading.Event()

    def seal_thread_ending() -> None:  # as _seal's ``finally`` does
        with sealing._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=seal_thread_ending, name="seal-copy")
    t.start()
    assert held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child
        try:
            is_sealed(probe)
            wait_sealed(1)
        finally:
            os._exit(0)
    release.set()
    t.join()
    deadline = time.monotonic() + 10
    done = 0
    while time.monotonic() < deadline and not done:
        done, _ = os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done, "the forked child hung on the sealing lock"


def test_is_sealed_while_the_seal_thread_is_being_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seal registered but not yet started is waited for by another thread.

    Not ``RuntimeError: cannot join thread before it is started`` from ``is_sealed``.
    """
    starting = threading.Event()

    class SlowStart(threading.Thread):
        def start(self) -> None:
            if self.name == "seal-copy":
                starting.set()
                time.sleep(0.3)  # the scheduler runs another thread first
            super().start()

    monkeypatch.setattr(sealing.threading, "Thread", SlowStart)
    target = tmp_path / "copy.tar"
    got: list[object] = []

    def other() -> None:
        starting.wait(10)
        try:
            got.append(is_sealed(target))
        except Exception as exc:  # noqa: BLE001 - the defect under test
            got.append(exc)

    reader = threading.Thread(target=other)
    reader.start()
    with sealing.sealed_behind(target, tmp_suffix=".tar") as fh:
        fh.write(b"x" * 1024)
    reader.join(10)
    assert got == [True]
    assert wait_sealed(10)
