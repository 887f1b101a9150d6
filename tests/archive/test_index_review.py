"""Hostile checks of a plain copy's kept member index (``<copy>.idx``, :mod:`.tar.plain_index`)."""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import open_archive
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar.plain_index import index_path, load_index, save_index
from cdml_edge.archive.tar.read import TarArchive

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd CLI")


def _stock(tmp: Path, entries: list[tuple[bytes, bytes | None]], name: str = "s") -> Path:
    """A one-frame tar.zst of ``entries`` (raw name, data; ``None``: a directory)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT,
                      encoding="utf-8", errors="surrogateescape") as tf:  # fmt: skip
        for raw, data in entries:
            info = tarfile.TarInfo(raw.decode("utf-8", "surrogateescape"))
            info.mtime = 1_700_000_000
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    plain = tmp / f"{name}.tar"
    plain.write_bytes(buf.getvalue())
    out = tmp / f"{name}.tar.zst"
    subprocess.run(["zstd", "-q", "-f", "-o", str(out), str(plain)], check=True)
    return out


def _rnd(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _same_as_walk(stock: Path, cache: SeekableCache) -> None:
    made = open_archive(stock, seekable_cache=cache)
    copy = made.seekable_copy.path  # type: ignore[attr-defined]
    assert made.format == "tar" and Path(index_path(copy)).is_file()
    again = open_archive(stock, seekable_cache=cache)
    assert again.seekable_copy.reused  # type: ignore[attr-defined]
    walked = open_archive(copy)
    direct = open_archive(stock)
    assert again.names() == walked.names() == direct.names()
    assert again.rows == walked.rows  # type: ignore[attr-defined]
    assert again.rows.dups == walked.rows.dups  # type: ignore[attr-defined]
    for n in direct.names():
        assert again.read(n) == direct.read(n) == walked.read(n)
        assert again.info(n).size == direct.info(n).size
        assert again.info(n).mtime == direct.info(n).mtime


def test_odd_names_dups_dirs_read_as_the_walk(tmp_path: Path) -> None:
    entries: list[tuple[bytes, bytes | None]] = [
        (b"./", None),
        (b"./a/", None),
        (b"./a/x.bin", _rnd(1, 5000)),
        (b"a/x.bin", _rnd(2, 7000)),  # a duplicate of ./a/x.bin: the later wins
        (b"lat\xe9.bin", _rnd(3, 3000)),  # not UTF-8
        (b"\xff\xfe/", None),
        (b"\xff\xfe/y", _rnd(4, 100)),
        (b"b//c.bin", _rnd(5, 1)),
        (b"dup", _rnd(6, 10)),
        (b"dup", _rnd(7, 20)),
        (b"dup", _rnd(8, 0)),
        (b"z" * 200, _rnd(9, 600_000)),  # a long name (GNU longname entry)
    ]
    _same_as_walk(_stock(tmp_path, entries), SeekableCache(tmp_path / "cache"))


def test_only_directories_and_empty(tmp_path: Path) -> None:
    # a plain copy needs a stream that does not shrink: one random member, then dirs only
    dirs = _stock(tmp_path, [(b"d/", None), (b"d/e/", None), (b"r", _rnd(1, 200_000))], "d")
    _same_as_walk(dirs, SeekableCache(tmp_path / "cache"))


def test_empty_index_round_trip(tmp_path: Path) -> None:
    stock = _stock(tmp_path, [(b"r", _rnd(1, 200_000))])
    cache = SeekableCache(tmp_path / "cache")
    copy = open_archive(stock, seekable_cache=cache).seekable_copy.path  # type: ignore[attr-defined]
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"\0" * 10240)
    rows = TarArchive(FileSource(str(empty))).rows
    assert save_index(empty, rows)
    got = load_index(empty, empty.stat().st_size)
    assert got is not None and got.names == [] and got == rows
    assert copy


def _cached(tmp_path: Path) -> tuple[Path, SeekableCache, str]:
    stock = _stock(tmp_path, [(f"m{i}".encode(), _rnd(i, 3000)) for i in range(30)])
    cache = SeekableCache(tmp_path / "cache")
    copy = open_archive(stock, seekable_cache=cache).seekable_copy.path  # type: ignore[attr-defined]
    return stock, cache, copy


def _reopen_within(stock: Path, cache: SeekableCache, seconds: float = 10.0) -> object:
    got: list[object] = []
    t = threading.Thread(
        target=lambda: got.append(open_archive(stock, seekable_cache=cache)), daemon=True
    )
    t.start()
    t.join(seconds)
    return got[0] if got else None


def test_fifo_index_does_not_hang_the_open(tmp_path: Path) -> None:
    stock, cache, copy = _cached(tmp_path)
    idx = index_path(copy)
    os.unlink(idx)
    os.mkfifo(idx)
    try:
        again = _reopen_within(stock, cache)
    finally:  # release a reader blocked on the FIFO
        try:
            fd = os.open(idx, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    assert again is not None, "open() blocked on a FIFO named <copy>.idx"
    assert again.names() == [f"m{i}" for i in range(30)]  # type: ignore[attr-defined]


def test_index_link_to_a_device_is_not_read(tmp_path: Path) -> None:
    stock, cache, copy = _cached(tmp_path)
    idx = index_path(copy)
    os.unlink(idx)
    os.symlink("/dev/zero", idx)  # read() of it never ends (and eats memory)
    again = _reopen_within(stock, cache, seconds=5.0)
    assert again is not None, "open() read /dev/zero through <copy>.idx"


@pytest.mark.parametrize("kind", ["empty", "truncated", "dir"])
def test_damaged_index_is_healed(tmp_path: Path, kind: str) -> None:
    stock, cache, copy = _cached(tmp_path)
    idx = Path(index_path(copy))
    good = idx.read_bytes()
    if kind == "empty":
        idx.write_bytes(b"")
    elif kind == "truncated":
        idx.write_bytes(good[: len(good) - 5])
    else:
        idx.unlink()
        idx.mkdir()
    again = open_archive(stock, seekable_cache=cache)
    assert again.names() == [f"m{i}" for i in range(30)]
    assert again.read("m3") == _rnd(3, 3000)
    if kind != "dir":
        assert idx.read_bytes() == good


def test_index_of_another_copy_of_the_same_size_is_not_used(tmp_path: Path) -> None:
    """An index left beside another copy of the same size (members in another order).

    The old index passes its size and CRC checks but names other bytes.
    """
    files = [(f"m{i}".encode(), _rnd(i, 3000 + i)) for i in range(30)]
    stock, cache, copy = _cached(tmp_path)
    a = _stock(tmp_path, files, "a")
    _stock(tmp_path, files[::-1], "b")
    copy_a = open_archive(a, seekable_cache=cache).seekable_copy.path  # type: ignore[attr-defined]
    tar_b = tmp_path / "b.tar"
    assert Path(copy_a).stat().st_size == tar_b.stat().st_size
    shutil.copyfile(tar_b, copy_a)  # the copy's bytes now those of b, its index a's
    direct = open_archive(tar_b)
    want = {n: direct.read(n) for n in direct.names()}
    kept = load_index(copy_a, Path(copy_a).stat().st_size)
    if kept is not None:
        arch = TarArchive(FileSource(copy_a), rows=kept)
        assert {n: arch.read(n) for n in arch.names()} == want
    again = open_archive(a, seekable_cache=cache)  # the copy is b's now: its walk says so
    assert again.seekable_copy.reused  # type: ignore[attr-defined]
    assert {n: again.read(n) for n in again.names()} == want


def test_refused_save_drops_a_stale_index(tmp_path: Path) -> None:
    """``save_index`` that cannot keep the index leaves no older one to be loaded next."""
    files = [(f"m{i}".encode(), _rnd(i, 3000)) for i in range(4)]
    stock, cache, copy = _cached(tmp_path)
    copy_p = Path(copy)
    old = open_archive(copy).rows  # type: ignore[attr-defined]
    assert save_index(copy, old)
    # the copy made again with a link in it (save refused): the old index must not stay
    src = tmp_path / "ln"
    src.mkdir()
    for n, d in files:
        (src / n.decode()).write_bytes(d)
    os.symlink("m0", src / "sym")
    linked = tmp_path / "linked.tar"
    subprocess.run(["tar", "-cf", str(linked), "-C", str(src), "."], check=True)
    shutil.copyfile(linked, copy_p)
    new = open_archive(copy).rows  # type: ignore[attr-defined]
    assert new.skipped
    assert not save_index(copy, new)
    assert not Path(index_path(copy)).exists()


def test_concurrent_saves(tmp_path: Path) -> None:
    stock, cache, copy = _cached(tmp_path)
    rows = open_archive(copy).rows  # type: ignore[attr-defined]
    ths = [threading.Thread(target=save_index, args=(copy, rows)) for _ in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert load_index(copy, Path(copy).stat().st_size) == rows
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".tmp-")]


def test_crashed_index_write_leaves_no_tmp_forever(tmp_path: Path) -> None:
    stock, cache, copy = _cached(tmp_path)
    stale = cache.root / ".tmp-deadbeef.part"
    stale.write_bytes(b"x" * 1000)
    os.utime(stale, (1, 1))  # a crash long ago
    other = _stock(tmp_path, [(b"o", _rnd(99, 200_000))], "o")
    open_archive(other, seekable_cache=cache)
    assert not stale.exists(), "a crashed write's temporary file is never swept"
    assert fresh_is_kept(cache)


def fresh_is_kept(cache: SeekableCache) -> bool:
    """A temporary file written just now (another process's copy under way) stays."""
    fresh = cache.root / ".tmp-cafe.tar"
    fresh.write_bytes(b"y")
    cache._evict(keep=cache.root / "none")
    return fresh.exists()


def test_s3_copy_index_follows_the_object_version(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    files = [(f"m{i}".encode(), _rnd(i, 3000 + i)) for i in range(30)]
    a = _stock(tmp_path, files, "a")
    b = _stock(tmp_path, files[::-1], "b")  # same tar size, other order
    cache = SeekableCache(tmp_path / "cache")
    url = "s3://stock/d.tar.zst"
    for stock in (a, b, a):
        s3_server.put("stock", "d.tar.zst", stock.read_bytes())  # a new ETag
        made = open_archive(url, seekable_cache=cache)
        copy = made.seekable_copy.path  # type: ignore[attr-defined]
        assert sorted(p.name for p in cache.root.iterdir()) == sorted(
            [Path(copy).name, Path(index_path(copy)).name]
        )
        with monkeypatch.context() as m:
            m.setattr("cdml_edge.archive.tar.read.PreadScanner", _no_walk)
            again = open_archive(url, seekable_cache=cache)
        direct = open_archive(stock)
        assert again.seekable_copy.reused and again.names() == direct.names()  # type: ignore[attr-defined]
        assert [again.read(n) for n in direct.names()] == [direct.read(n) for n in direct.names()]
        for arc in (made, again, direct):  # a copy held open by a reader is kept
            arc.close()


def _no_walk(*_: object) -> None:
    raise AssertionError("the copy was walked")


def test_orphan_index_sweep_never_deletes_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep of indexes whose copy is gone deletes the index, not a copy made meanwhile.

    Another process makes the copy again between the sweep's ``exists`` and its unlink.
    """
    from cdml_edge.archive import seekable_cache

    stock, cache, copy = _cached(tmp_path)
    body = Path(copy).read_bytes()
    os.unlink(copy)  # evicted by another process: its index is an orphan for a moment
    real = os.path.exists

    def exists_then_remade(p: str) -> bool:
        seen = real(p)
        if p == copy and not seen:
            Path(copy).write_bytes(body)  # the other process renames its new copy in
        return seen

    with monkeypatch.context() as m:
        m.setattr(seekable_cache.os.path, "exists", exists_then_remade)
        cache._evict(keep=cache.root / "none")
    assert Path(copy).exists(), "the sweep deleted a copy that exists"


def test_empty_index_is_not_used_for_a_copy_with_members(tmp_path: Path) -> None:
    """An index of no member, left beside a copy of the same size that holds members."""
    copy = tmp_path / "c.tar"
    copy.write_bytes(b"\0" * 10240)  # an empty tar stream
    assert save_index(copy, TarArchive(FileSource(str(copy))).rows)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("one")
        info.size = 100
        tf.addfile(info, io.BytesIO(b"1" * 100))
    copy.write_bytes(buf.getvalue().ljust(10240, b"\0"))
    walked = TarArchive(FileSource(str(copy))).rows
    assert walked.names == ["one"]
    kept = load_index(copy, copy.stat().st_size)
    assert kept is None or kept.names == walked.names


def test_index_larger_than_its_copy_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regular file under the index's name, larger than the copy: not read into memory."""
    stock, cache, copy = _cached(tmp_path)
    idx = index_path(copy)
    with open(idx, "r+b") as fh:  # a valid index with junk after it
        fh.seek(os.path.getsize(copy) + (1 << 20))
        fh.write(b"x")
    reads: list[int] = []
    real_open = open

    def counting_open(file: object, *args: object, **kw: object) -> object:
        fh = real_open(file, *args, **kw)  # type: ignore[call-overload]
        if isinstance(file, int):
            reads.append(os.fstat(file).st_size)
        return fh

    monkeypatch.setattr("builtins.open", counting_open)
    again = open_archive(stock, seekable_cache=cache)
    monkeypatch.undo()
    assert again.names() and not reads
