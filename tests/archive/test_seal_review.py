"""Hostile tests of the copies sealed behind their first reader (:mod:`cdml_edge.archive.sealing`).

Processes that exit or fork while a seal is under way, and the header walk made while a
plain copy is written compared with the walk of the copy.
"""

from __future__ import annotations

import contextlib
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
from helpers.full_disk import small_tmpfs

from cdml_edge.archive import native, open_archive, sealing
from cdml_edge.archive.sealing import SEALED, is_sealed, wait_sealed
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.tar import native_copy, reframe

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


def test_is_sealed_when_the_seal_ends_between_its_stat_and_its_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seal that ends after ``is_sealed`` looked at the file, before it looked for the seal.

    The look at the file is then stale: it was taken before the seal (CI saw ``False``).
    """
    gate = threading.Event()

    class HeldFsync:  # the seal thread waits here until the reader has looked at the file
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        @staticmethod
        def fsync(fd: int) -> None:
            gate.wait(10)
            os.fsync(fd)

    real = sealing._lock
    armed: list[bool] = []

    class LateLookup:  # the reader's lookup comes only once the seal has ended
        def __enter__(self) -> bool:
            if armed and threading.current_thread() is threading.main_thread():
                armed.clear()
                gate.set()
                for thread in list(sealing._pending.values()):
                    thread.join(10)
            return real.__enter__()

        def __exit__(self, *exc: object) -> None:
            real.__exit__(*exc)

    monkeypatch.setattr(sealing, "os", HeldFsync())
    monkeypatch.setattr(sealing, "_lock", LateLookup())
    target = tmp_path / "copy.tar"
    with sealing.sealed_behind(target, tmp_suffix=".tar") as fh:
        fh.write(b"x" * 1024)
    armed.append(True)
    assert is_sealed(target)
    assert not armed, "the reader did not look for the seal"
    assert wait_sealed(10)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("after", [0, 2 << 20, 6 << 20])
def test_full_disk_while_the_copy_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    """ENOSPC from the Python path's writer thread (in the probe, in the walk, at the end).

    No copy, the archive read as it is, no thread or descriptor left behind, no hang.
    """
    import errno

    from cdml_edge.archive import seekable_cache as sc

    src = tmp_path / "tree"
    rnd = __import__("random").Random(3)
    files = {}
    for i in range(12):
        files[f"./f{i:02d}"] = rnd.randbytes(700_000)
        (src / f"f{i:02d}").parent.mkdir(parents=True, exist_ok=True)
        (src / f"f{i:02d}").write_bytes(files[f"./f{i:02d}"])
    path = tmp_path / "stock.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(path), "-C", str(src), "."], check=True)
    real = sc.sealed_behind

    class Full:
        def __init__(self, fh: object) -> None:
            self._fh, self.n = fh, 0

        def write(self, b: bytes) -> int:
            self.n += len(b)
            if self.n > after:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._fh.write(b)  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self._fh, name)

    @contextlib.contextmanager
    def full(p: Path, tmp_suffix: str):  # type: ignore[no-untyped-def]
        with real(p, tmp_suffix) as fh:
            yield Full(fh)

    monkeypatch.setattr(sc, "sealed_behind", full)
    monkeypatch.setattr(reframe, "plain_copier", lambda: None)  # the Python path's writer
    _read_as_it_is(path, SeekableCache(tmp_path / "cache"), files, times=3)


def _threads_started_since(before: set[threading.Thread], wait: float = 5.0) -> list[str]:
    """Threads alive now that were not in ``before``, given ``wait`` s to end.

    Counting all threads instead failed when a thread of an earlier test ended meanwhile.
    """
    deadline = time.monotonic() + wait
    while (new := set(threading.enumerate()) - before) and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(t.name for t in new)


def _read_as_it_is(path: Path, cache: SeekableCache, files: dict[str, bytes], times: int) -> None:
    """Opened ``times`` on a full disk: no copy, read as it is, nothing left behind."""
    open_archive(path).names()  # imports, caches warmed
    threads, fds = set(threading.enumerate()), _fds()
    for _ in range(times):
        archive = open_archive(path, seekable_cache=cache)
        assert archive.seekable_copy is None  # type: ignore[attr-defined]
        assert archive.read("./f05") == files["./f05"]
        archive.close()
    assert wait_sealed(10)
    assert _threads_started_since(threads) == []
    assert _fds() == fds
    assert not list(cache.root.iterdir())


def test_dataloader_workers_read_while_the_seal_is_under_way(
    tmp_path: Path, held_seals: threading.Event
) -> None:
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    path = _stock(tmp_path, n=40)
    ds = CDMLStreamDataset(path, seekable_cache=tmp_path / "cache")
    copy = ds._get_archive().seekable_copy.path
    assert stat.S_IMODE(os.stat(copy).st_mode) != SEALED
    stock = open_archive(path)
    got = [
        x for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list) for x in batch
    ]
    assert [bytes(x) for x in got] == [stock.read(n) for n in ds.names]
    assert stat.S_IMODE(os.stat(copy).st_mode) != SEALED  # the workers made no copy again
    held_seals.set()
    assert wait_sealed(30) and stat.S_IMODE(os.stat(copy).st_mode) == SEALED
    again = CDMLStreamDataset(path, seekable_cache=tmp_path / "cache")._get_archive()
    assert again.seekable_copy.reused


def test_plain_copy_evicted_after_open_is_still_read(tmp_path: Path) -> None:
    """An archive opened from its fresh plain copy holds it, as the walk of the copy did.

    The copy is opened with the index walked while it was written (no walk of the copy);
    a copy deleted before the first read (another archive's copy evicted it from the
    bounded folder, another process dropped it) must not make that read fail.
    """
    rnd = __import__("random").Random(5)
    paths, files = [], []
    for k in range(2):
        src = tmp_path / f"tree{k}"
        src.mkdir()
        got = {}
        for i in range(8):
            got[f"./f{i}"] = rnd.randbytes(60_000)
            (src / f"f{i}").write_bytes(got[f"./f{i}"])
        out = tmp_path / f"s{k}.tar.zst"
        subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
        paths.append(out)
        files.append(got)
    cache = SeekableCache(tmp_path / "cache", max_bytes=700_000)  # one copy fits
    first = open_archive(paths[0], seekable_cache=cache)
    copy = first.seekable_copy.path  # type: ignore[attr-defined]
    second = open_archive(paths[1], seekable_cache=cache)
    assert second.seekable_copy is not None  # type: ignore[attr-defined]
    assert not os.path.exists(copy)  # evicted
    assert {"./" + n: first.read(n) for n in first.names()} == files[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_no_descriptor_of_a_copy_left_after_many_opens(tmp_path: Path) -> None:
    """Copies made (the cache emptied each time), reused and made again when unsealed.

    Only descriptors of the cache folder count: the stock archive's own descriptor, opened to
    detect its format, is left open by every open through the cache (before this change too).
    """
    path = _stock(tmp_path, n=10)
    cache_dir = tmp_path / "cache"

    def copies_held() -> list[str]:
        out = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if str(cache_dir) in os.readlink(f"/proc/self/fd/{fd}"):
                    out.append(fd)
        return out

    threads = set(threading.enumerate())  # others may end meanwhile: only new ones count
    for i in range(15):
        if i % 3 == 0:
            shutil.rmtree(cache_dir, ignore_errors=True)
        elif i % 3 == 1:
            for p in cache_dir.iterdir():
                os.chmod(p, sealing.UNSEALED)
        archive = open_archive(path, seekable_cache=SeekableCache(cache_dir))
        assert archive.names() and archive.read(archive.names()[0]) is not None
        archive.close()
    assert wait_sealed(10)
    assert copies_held() == []
    assert _threads_started_since(threads) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_stock_archive_not_held_once_read_from_its_copy(tmp_path: Path) -> None:
    """Opening a stock archive through the cache leaves no descriptor of the stock file.

    Its format was detected from its bytes, then the archive served is its copy's: a
    long-running process that opens many shards must not keep one descriptor each.
    (Before the sealing change too.)
    """
    path = _stock(tmp_path, n=10)
    cache_dir = tmp_path / "cache"

    def held() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        return n

    for i in range(6):
        if i % 2 == 0:
            shutil.rmtree(cache_dir, ignore_errors=True)
        archive = open_archive(path, seekable_cache=SeekableCache(cache_dir))
        assert archive.seekable_copy is not None  # type: ignore[attr-defined]
        assert archive.read(archive.names()[0]) is not None
        archive.close()
    assert held() == 0


def test_two_processes_open_the_same_stock_archive_at_once(tmp_path: Path) -> None:
    """Both read every member right; the copy left in place is sealed and then reused."""
    path = _stock(tmp_path, n=30)
    cache = tmp_path / "cache"
    code = (
        "import os, sys, threading, time\n"
        "from cdml_edge.archive import open_archive\n"
        "from cdml_edge.archive.seekable_cache import SeekableCache\n"
        "real = os.fsync\n"
        "def slow(fd):\n"
        "    if threading.current_thread().name == 'seal-copy': time.sleep(0.7)\n"
        "    real(fd)\n"
        "os.fsync = slow\n"
        "stock = open_archive(sys.argv[1])\n"
        "want = {n: stock.read(n) for n in stock.names()}\n"
        "for _ in range(3):\n"
        "    a = open_archive(sys.argv[1], seekable_cache=SeekableCache(sys.argv[2]))\n"
        "    assert a.seekable_copy is not None\n"
        "    assert {n: a.read(n) for n in a.names()} == want\n"
        "    time.sleep(0.2)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), str(cache)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == b"ok", err.decode()[-2000:]
    (copy,) = [p for p in cache.iterdir() if p.name.endswith(".tar")]
    assert stat.S_IMODE(copy.stat().st_mode) == SEALED
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]
    again = open_archive(path, seekable_cache=SeekableCache(cache))
    assert again.seekable_copy.reused  # type: ignore[attr-defined]


def test_copy_reused_where_the_mount_ignores_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mount that shows every file 0600 and ignores chmod: copies fsynced first, reused."""
    path = _stock(tmp_path, n=10)
    monkeypatch.setattr(sealing.os, "fchmod", lambda fd, mode: None)  # accepted, not kept
    cache = SeekableCache(tmp_path / "cache")
    first = open_archive(path, seekable_cache=cache)
    assert first.seekable_copy is not None  # type: ignore[attr-defined]
    assert wait_sealed(10)
    again = open_archive(path, seekable_cache=cache)
    assert again.seekable_copy.reused  # type: ignore[attr-defined]


def test_reopened_through_another_spelling_of_the_folder_waits_for_the_seal(
    tmp_path: Path, held_seals: threading.Event
) -> None:
    """The seal under way in this process is found whatever the spelling of the folder.

    Two datasets of one process name the same cache folder differently (relative and
    absolute, through a symbolic link): the second must wait for the seal, not make the
    copy again.
    """
    path = _stock(tmp_path, n=10)
    (tmp_path / "cache").mkdir()
    os.symlink(tmp_path / "cache", tmp_path / "link")
    made = open_archive(path, seekable_cache=SeekableCache(tmp_path / "cache"))
    assert not made.seekable_copy.reused  # type: ignore[attr-defined]
    threading.Timer(0.3, held_seals.set).start()
    again = open_archive(path, seekable_cache=SeekableCache(tmp_path / "link"))
    assert again.seekable_copy.reused  # type: ignore[attr-defined]


def test_a_forked_child_closes_the_descriptors_of_its_parents_seals(
    tmp_path: Path, held_seals: threading.Event
) -> None:
    """A seal under way when a worker forks: the child does not hold the copy open."""
    path = _stock(tmp_path, n=10)
    try:
        made = open_archive(path, seekable_cache=SeekableCache(tmp_path / "cache"))
        copy = os.stat(made.seekable_copy.path)  # type: ignore[attr-defined]
        [fd] = sealing._fds.values()
        pid = os.fork()
        if pid == 0:  # the child: the seal's descriptor is no longer the copy's
            try:
                st = os.fstat(fd)
                held = (st.st_dev, st.st_ino) == (copy.st_dev, copy.st_ino)
            except OSError:
                held = False
            os._exit(3 if held else 0)
        _, status = os.waitpid(pid, 0)
    finally:
        held_seals.set()
    assert os.waitstatus_to_exitcode(status) == 0
    assert wait_sealed(30) and not sealing._fds


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.skipif(native.plain_copier() is None, reason="the C core with zstd is not built")
@pytest.mark.parametrize(("disk", "c_core_tried"), [("64k", False), ("5m", True)])
def test_full_disk_while_the_c_core_writes_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: str, c_core_tried: bool
) -> None:
    """A real full disk (a small tmpfs) under the C core's copy: the same as the Python path.

    The probe's writes (its first 4 MiB) fail on 64 KiB, the C core's on 5 MiB (the tar
    stream is 5.6 MB), and the Python path writes the copy instead and fails the same way:
    no copy, the archive read as it is, nothing left on the disk, no thread or descriptor.
    """
    src = tmp_path / "tree"
    src.mkdir()
    rnd = __import__("random").Random(4)
    files = {f"./f{i:02d}": rnd.randbytes(700_000) for i in range(8)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    path = tmp_path / "stock.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(path), "-C", str(src), "."], check=True)
    tried: list[object] = []
    real = native_copy.plain_copy
    monkeypatch.setattr(native_copy, "plain_copy", lambda *a: tried.append(real(*a)) or tried[-1])
    with small_tmpfs(tmp_path / "cache", disk) as cache_dir:
        _read_as_it_is(path, SeekableCache(cache_dir), files, times=1)
        # the C core's write failed (the copy handed to the Python path), or the probe's
        assert tried == ([None] if c_core_tried else [])
