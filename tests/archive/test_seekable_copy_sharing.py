"""A seekable copy shared by processes: replaced by one, or a new version made by another.

Ranks of one job (DDP) open the same stock tar.zst with one cache folder: each may write
the copy, the last rename wins. A copy's bytes follow from its key (the source's version),
so a copy found replaced at its path with its size is the same copy, not a changed archive.
A ctime-only change of the source (``chmod``, a new hard link) makes a new version: the
copy another process still reads is not deleted under it, and a copy that vanished anyway
(evicted) is an ``ArchiveError`` naming the user's archive, never a bare
``FileNotFoundError``.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import pickle
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import zstandard

from cdml_edge.archive import ArchiveChangedError, ArchiveError, open_archive
from cdml_edge.archive.seekable_cache import SeekableCache

MEMBERS = {f"x/{i}.csv": b"%d,1.0,2.0,3.0\n" % i * 6000 for i in range(12)}


def _stock(path: Path) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in MEMBERS.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(buf.getvalue()))
    return path


def _copies(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.name.endswith((".tar", ".tar.zst")))


def test_a_copy_replaced_by_another_process_with_its_bytes_reads(tmp_path: Path) -> None:
    src, cache = _stock(tmp_path / "s.tar.zst"), tmp_path / "cache"
    with open_archive(src, seekable_cache=SeekableCache(cache)) as arc:
        copy = Path(arc.seekable_copy.path)  # type: ignore[attr-defined]
        blob = pickle.dumps(arc)  # as a spawned worker gets it
        again = tmp_path / "again"
        shutil.copyfile(copy, again)  # another rank's copy, renamed over this one
        os.replace(again, copy)
        worker = pickle.loads(blob)
        assert worker.read("x/3.csv") == MEMBERS["x/3.csv"]
        worker.close()
        arc.source.close()  # its descriptor reopened on the next read: the new file
        assert arc.read("x/5.csv") == MEMBERS["x/5.csv"]


def test_a_copy_replaced_with_other_bytes_is_still_refused(tmp_path: Path) -> None:
    src, cache = _stock(tmp_path / "s.tar.zst"), tmp_path / "cache"
    with open_archive(src, seekable_cache=SeekableCache(cache)) as arc:
        copy = Path(arc.seekable_copy.path)  # type: ignore[attr-defined]
        blob = pickle.dumps(arc)
        copy.write_bytes(copy.read_bytes()[:-1])  # not the copy its key names
        with pytest.raises(ArchiveChangedError):
            pickle.loads(blob).read("x/3.csv")


def _rank(path: str, cache: str, barrier: Any, queue: Any) -> None:
    barrier.wait()
    arc = open_archive(path, seekable_cache=SeekableCache(cache))
    barrier.wait()  # every rank has opened (and perhaps written the copy)
    try:
        worker = pickle.loads(pickle.dumps(arc))  # what a spawned DataLoader worker gets
        queue.put(worker.read("x/7.csv") == MEMBERS["x/7.csv"])
    except Exception as exc:  # noqa: BLE001 - reported to the test
        queue.put(f"{type(exc).__name__}: {exc}")


def test_ranks_sharing_one_cache_folder_read_from_their_workers(tmp_path: Path) -> None:
    src, cache = _stock(tmp_path / "s.tar.zst"), tmp_path / "cache"
    ctx = mp.get_context("spawn")
    n = 4
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_rank, args=(str(src), str(cache), barrier, queue)) for _ in range(n)
    ]
    for p in procs:
        p.start()
    got = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert got == [True] * n


def test_a_ctime_change_keeps_the_copy_another_process_reads(tmp_path: Path) -> None:
    src, cache = _stock(tmp_path / "s.tar.zst"), tmp_path / "cache"
    a = open_archive(src, seekable_cache=SeekableCache(cache))
    blob = pickle.dumps(a)
    os.chmod(src, 0o640)  # content, size and mtime unchanged: a new version (ctime)
    with open_archive(src, seekable_cache=SeekableCache(cache)) as b:
        assert b.read("x/1.csv") == MEMBERS["x/1.csv"]
        assert b.seekable_copy.path != a.seekable_copy.path  # type: ignore[attr-defined]
    assert os.path.exists(a.seekable_copy.path)  # type: ignore[attr-defined]
    worker = pickle.loads(blob)
    assert worker.read("x/2.csv") == MEMBERS["x/2.csv"]
    worker.close()
    a.close()
    os.chmod(src, 0o644)  # the next version: the copies nobody reads now go
    with open_archive(src, seekable_cache=SeekableCache(cache)) as c:
        assert c.read("x/1.csv") == MEMBERS["x/1.csv"]
        assert _copies(cache) == [Path(c.seekable_copy.path)]  # type: ignore[attr-defined]


def test_a_vanished_copy_is_an_archive_error_naming_the_source(tmp_path: Path) -> None:
    src, cache = _stock(tmp_path / "s.tar.zst"), tmp_path / "cache"
    with open_archive(src, seekable_cache=SeekableCache(cache)) as arc:
        blob = pickle.dumps(arc)
        os.unlink(arc.seekable_copy.path)  # type: ignore[attr-defined]  # evicted
        with pytest.raises(ArchiveError) as err:
            pickle.loads(blob).read("x/3.csv")
    assert not isinstance(err.value, FileNotFoundError)
    assert err.value.archive is not None and err.value.archive.startswith(str(src))
