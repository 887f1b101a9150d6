"""Seekable copies of stock tar.zst archives (``tar --zstd``, concatenated ``zstd`` frames).

Real archives written by GNU tar and the zstd CLI; the copy must give the very bytes of the
stock archive, be reused while the source is unchanged, be made again when its size or
mtime change, and keep its folder within the byte bound.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import open_archive, write_archive
from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.sealing import SEALED, UNSEALED, is_sealed, wait_sealed
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.tar.plain_index import index_path
from cdml_edge.archive.tar.reframe import frame_cuts
from cdml_edge.archive.tar.write import MAX_FRAME_BYTES
from cdml_edge.fsio import block_size, on_disk

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd CLI")


def _tree(root: Path, seed: int = 0, n: int = 120, text: bool = False) -> dict[str, bytes]:
    """Files of many sizes in nested folders, one of them over a frame (2.5 MiB).

    Random bytes (zstd cannot shrink them, as JPEGs), or ``text`` (it shrinks them well).
    """
    rnd = __import__("random").Random(seed)
    files: dict[str, bytes] = {}
    for i in range(n):
        name = f"{('ok', 'dent', 'deep/er')[i % 3]}/{i:04d}.bin"
        size = rnd.randrange(0, 40_000)
        files[name] = (b"%d,%d\n" % (i, size)) * (size // 10) if text else rnd.randbytes(size)
    files["big/huge.bin"] = rnd.randbytes(5 << 19)
    files["empty.txt"] = b""
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def _stock(
    tmp: Path, seed: int = 0, n: int = 120, text: bool = False
) -> tuple[Path, dict[str, bytes]]:
    src = tmp / f"tree-{seed}-{n}-{text}"
    files = _tree(src, seed, n, text)
    out = tmp / f"stock-{seed}-{n}-{text}.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
    return out, files


def _copies(cache: SeekableCache) -> list[Path]:
    """The copies in the cache folder (a plain copy's kept member index aside)."""
    return [p for p in cache.root.iterdir() if not p.name.endswith(".idx")]


def _same(archive_path: Path, files: dict[str, bytes], cache: SeekableCache) -> object:
    stock = open_archive(archive_path)
    assert not stock.seekable  # type: ignore[attr-defined]
    copied = open_archive(archive_path, seekable_cache=cache)
    assert copied.seekable_copy is not None  # type: ignore[attr-defined]
    names = stock.names()
    assert names == copied.names() and set(names) == set(files)
    for name in names:
        assert copied.read(name) == stock.read(name) == files[name]
    shuffled = names[::7] + names[3::5]
    assert copied.read_many(shuffled) == [files[n] for n in shuffled]
    if copied.format == "tar.zst":
        assert all(copied.info(n).checksum is not None for n in names)  # a CRC-32 each
    return copied.seekable_copy  # type: ignore[attr-defined]


@pytest.mark.parametrize(("text", "kind"), [(False, "tar"), (True, "tar.zst")])
def test_copy_gives_the_stock_bytes_and_is_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: bool, kind: str
) -> None:
    """Incompressible members: a plain tar copy; compressible ones: a seekable tar.zst."""
    path, files = _stock(tmp_path, text=text)
    cache = SeekableCache(tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger="cdml_edge.archive.seekable_cache"):
        made = _same(path, files, cache)
    on_the_disk = on_disk(made.bytes, block_size(cache.root))  # type: ignore[attr-defined]
    assert not made.reused and on_the_disk == cache.total_bytes()
    assert "made a" in caplog.text and str(path) in caplog.text
    copy = Path(made.path)  # type: ignore[attr-defined]
    assert copy.name.endswith(f".{kind}") and len(_copies(cache)) == 1
    if kind == "tar.zst":
        assert made.bytes < path.stat().st_size * 1.5  # type: ignore[attr-defined]
    unpack = "zstd -dc" if kind == "tar.zst" else "cat"
    listing = subprocess.run(
        f"{unpack} {copy} | tar -t", shell=True, check=True, capture_output=True, text=True
    ).stdout
    assert "./big/huge.bin" in listing.split("\n")  # stock tools still read the copy
    stamp = copy.stat().st_mtime_ns
    again = open_archive(path, seekable_cache=cache)
    info = again.seekable_copy  # type: ignore[attr-defined]
    assert info.reused and info.path == str(copy) and len(_copies(cache)) == 1
    assert copy.stat().st_mtime_ns >= stamp  # reuse refreshes it for the LRU order
    assert again.read("big/huge.bin") == files["big/huge.bin"]


def test_made_again_when_size_or_mtime_change(tmp_path: Path) -> None:
    path, _ = _stock(tmp_path)
    cache = SeekableCache(tmp_path / "cache")
    # each archive closed: a copy held open by a reader is kept (test_seekable_copy_sharing)
    with open_archive(path, seekable_cache=cache) as arc:
        first = arc.seekable_copy  # type: ignore[attr-defined]
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, new mtime
    with open_archive(path, seekable_cache=cache) as arc:
        second = arc.seekable_copy  # type: ignore[attr-defined]
    assert not second.reused and second.path != first.path and not Path(first.path).exists()
    other, files = _stock(tmp_path, seed=1, n=80)
    other.replace(path)  # new size (and content) under the same name
    third = _same(path, files, cache)
    assert not third.reused and [p.name for p in _copies(cache)] == [  # type: ignore[attr-defined]
        Path(third.path).name  # type: ignore[attr-defined]
    ]


def test_folder_stays_within_its_bound(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, _ = _stock(tmp_path, seed=2, n=60)
    b, files_b = _stock(tmp_path, seed=3, n=60)
    one = open_archive(a, seekable_cache=SeekableCache(tmp_path / "probe"))
    size = one.seekable_copy.bytes  # type: ignore[attr-defined]
    cache = SeekableCache(tmp_path / "cache", max_bytes=size + size // 2)  # room for one copy
    open_archive(a, seekable_cache=cache)
    copy_b = _same(b, files_b, cache)
    assert cache.total_bytes() <= cache.max_bytes
    assert [p.name for p in _copies(cache)] == [Path(copy_b.path).name]  # type: ignore[attr-defined]
    tiny = SeekableCache(tmp_path / "tiny", max_bytes=1000)  # smaller than any source
    with caplog.at_level(logging.WARNING, logger="cdml_edge.archive.seekable_cache"):
        plain = open_archive(a, seekable_cache=tiny)
    assert plain.seekable_copy is None and not plain.seekable  # type: ignore[attr-defined]
    assert "larger than the seekable cache" in caplog.text
    assert not tiny.root.exists() or tiny.total_bytes() == 0


def test_few_large_frames_are_copied_seekable_ones_are_not(tmp_path: Path) -> None:
    src = tmp_path / "tree"
    files = _tree(src)
    tar = tmp_path / "plain.tar"
    subprocess.run(["tar", "-cf", str(tar), "-C", str(src), "."], check=True)
    raw = tar.read_bytes()
    half = len(raw) // 2  # two zstd frames, concatenated as pzstd writes them
    parts = []
    for k, chunk in enumerate((raw[:half], raw[half:])):
        (tmp_path / f"p{k}").write_bytes(chunk)
        subprocess.run(["zstd", "-q", "-f", str(tmp_path / f"p{k}")], check=True)
        parts.append((tmp_path / f"p{k}.zst").read_bytes())
    two = tmp_path / "two.tar.zst"
    two.write_bytes(b"".join(parts))
    cache = SeekableCache(tmp_path / "cache")
    _same(two, files, cache)
    ours = tmp_path / "ours.tar.zst"
    write_archive(ours, sorted(files.items()))
    opened = open_archive(ours, seekable_cache=cache)
    assert opened.seekable_copy is None and cache.total_bytes() > 0  # type: ignore[attr-defined]
    assert len(_copies(cache)) == 1


def test_frame_cuts_at_member_starts() -> None:
    assert frame_cuts([0, 512, 1024, 9000, 17000, 20000], frame_bytes=8192) == [
        0,
        1024,
        9000,
        17000,
    ]
    big = frame_cuts([0, 512, 512 + 3 * MAX_FRAME_BYTES], frame_bytes=8192)
    assert big[:2] == [0, 512] and all(b - a <= MAX_FRAME_BYTES for a, b in itertools.pairwise(big))


def test_dataset_reads_the_copy(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    path, files = _stock(tmp_path, n=48)
    ds = CDMLStreamDataset(path, labels="folder", seekable_cache=tmp_path / "cache")
    assert ds._get_archive().seekable_copy is not None
    got = {}
    names = iter(ds.names)
    for batch in DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list):
        for x, _ in batch:
            got[next(names)] = x
    assert got == {n: files[n] for n in ds.names}
    off = CDMLStreamDataset(path, seekable_cache=False)
    assert not off._get_archive().seekable


def test_s3_stock_archive(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    path, files = _stock(tmp_path, n=40)
    s3_server.put("stock", "d.tar.zst", path.read_bytes())
    cache = SeekableCache(tmp_path / "cache")
    url = "s3://stock/d.tar.zst"
    made = open_archive(url, seekable_cache=cache)
    assert not made.seekable_copy.reused  # type: ignore[attr-defined]
    assert made.read_many(sorted(files)[::-1]) == [files[n] for n in sorted(files)[::-1]]
    s3_server.proxy.reset()
    again = open_archive(url, seekable_cache=cache)
    assert again.seekable_copy.reused  # type: ignore[attr-defined]
    assert again.read("big/huge.bin") == files["big/huge.bin"]
    # opening reads the tail and the head (format detection), no more of the object
    assert s3_server.proxy.count("GET") <= 2
    assert s3_server.proxy.body_bytes("GET") < path.stat().st_size // 10
    made.close()  # a copy held open by a reader is kept (test_seekable_copy_sharing)
    again.close()
    other, files2 = _stock(tmp_path, seed=4, n=30)
    s3_server.put("stock", "d.tar.zst", other.read_bytes())  # a new ETag
    third = open_archive(url, seekable_cache=cache)
    assert not third.seekable_copy.reused  # type: ignore[attr-defined]
    assert third.read("ok/0000.bin") == files2["ok/0000.bin"]
    assert len(_copies(cache)) == 1


def test_s3_stock_archive_opens_in_few_requests(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass over a one-frame archive reads ahead: not one ranged GET per 512 bytes."""
    from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    path, files = _stock(tmp_path, n=40)
    s3_server.put("stock", "plain.tar.zst", path.read_bytes())
    s3_server.proxy.reset()
    archive = open_archive("s3://stock/plain.tar.zst")
    assert not archive.seekable and set(archive.names()) == set(files)  # type: ignore[attr-defined]
    assert s3_server.proxy.count("GET") <= 2 + path.stat().st_size // (1 << 20)


def test_seek_table_of_large_frames_gets_a_seekable_copy(tmp_path: Path) -> None:
    """A seek table without our index, frames of 2 MiB (pyzstd): copied with small frames."""
    pyzstd = pytest.importorskip("pyzstd")
    src = tmp_path / "tree"
    files = _tree(src, text=True)
    tar = tmp_path / "plain.tar"
    subprocess.run(["tar", "-cf", str(tar), "-C", str(src), "."], check=True)
    big = tmp_path / "big.tar.zst"
    with pyzstd.SeekableZstdFile(big, "w", max_frame_content_size=2 << 20) as fh:
        fh.write(tar.read_bytes())
    stock = open_archive(big)
    assert stock.seekable and "zstd frames of" in stock.seekable_copy_reason()  # type: ignore[attr-defined]
    cache = SeekableCache(tmp_path / "cache")
    copied = open_archive(big, seekable_cache=cache)
    assert copied.format == "tar.zst" and copied.seekable_copy is not None  # type: ignore[attr-defined]
    assert copied.read_many(sorted(files)) == [files[n] for n in sorted(files)]
    assert all(copied.info(n).checksum is not None for n in files)


def test_plain_copy_index_is_the_walk_of_the_copy(tmp_path: Path) -> None:
    """The member index walked while the copy is written is the one a walk of the copy finds.

    GNU tar's long names (over 100 bytes), a symbolic link (skipped), a hard link, empty
    files and a member over a 1-MiB block of the copy.
    """
    src = tmp_path / "tree"
    files = _tree(src, n=40)
    long_name = "deep/" + "n" * 140 + ".bin"
    (src / long_name).write_bytes(b"long")
    files[long_name] = b"long"
    os.symlink("empty.txt", src / "sym")
    os.link(src / "empty.txt", src / "hard")
    files["hard"] = b""
    stock = tmp_path / "odd.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(stock), "-C", str(src), "."], check=True)
    copied = open_archive(stock, seekable_cache=SeekableCache(tmp_path / "cache"))
    assert copied.format == "tar" and not copied.seekable_copy.reused  # type: ignore[attr-defined]
    walked = open_archive(copied.seekable_copy.path)  # type: ignore[attr-defined]
    assert copied._rows == walked._rows  # type: ignore[attr-defined]
    skipped = copied.skipped()
    assert skipped == walked.skipped() and list(skipped) == ["./sym"]
    read = {n: copied.read(n) for n in copied.names()}
    assert read == files  # the hard link too, with its target's bytes


def test_truncated_stock_archive_leaves_no_copy(tmp_path: Path) -> None:
    path, _ = _stock(tmp_path, n=60)
    cut = tmp_path / "cut.tar.zst"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    cache = SeekableCache(tmp_path / "cache")
    with pytest.raises(ArchiveError) as err:
        open_archive(cut, seekable_cache=cache)
    assert str(cut) in str(err.value)
    assert cache.total_bytes() == 0


def test_copy_is_sealed_behind_and_an_unsealed_one_is_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Renamed into place unsealed, fsynced and sealed by a thread; unsealed: not trusted."""
    path, files = _stock(tmp_path, n=60)
    cache = SeekableCache(tmp_path / "cache")
    first = open_archive(path, seekable_cache=cache)
    copy = Path(first.seekable_copy.path)  # type: ignore[attr-defined]
    assert wait_sealed(timeout=30)
    assert stat.S_IMODE(copy.stat().st_mode) == SEALED
    reused = open_archive(path, seekable_cache=cache)
    assert reused.seekable_copy.reused  # type: ignore[attr-defined]
    os.chmod(copy, UNSEALED)  # as the machine going down before the seal leaves it
    inode = copy.stat().st_ino
    with caplog.at_level(logging.INFO, logger="cdml_edge.archive.seekable_cache"):
        again = open_archive(path, seekable_cache=cache)
    assert "is not sealed" in caplog.text and str(copy) in caplog.text
    info = again.seekable_copy  # type: ignore[attr-defined]
    assert not info.reused and info.path == str(copy) and copy.stat().st_ino != inode
    assert {n: again.read(n) for n in again.names()} == files
    assert wait_sealed(timeout=30) and is_sealed(copy)


def test_reopened_while_its_seal_is_under_way_waits_for_it(
    tmp_path: Path, held_seals: threading.Event
) -> None:
    """A second open in the process that is sealing the copy waits for the seal, no remake."""
    path, _ = _stock(tmp_path, n=30)
    cache = SeekableCache(tmp_path / "cache")
    made = open_archive(path, seekable_cache=cache).seekable_copy  # type: ignore[attr-defined]
    assert not is_sealed_now(made.path)
    threading.Timer(0.2, held_seals.set).start()
    again = open_archive(path, seekable_cache=cache).seekable_copy  # type: ignore[attr-defined]
    assert again.reused and again.path == made.path and is_sealed_now(made.path)


def is_sealed_now(path: str) -> bool:
    """The mode alone, without waiting for a seal under way."""
    return stat.S_IMODE(os.stat(path).st_mode) != UNSEALED


def test_plain_copy_reopens_from_its_kept_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reopened without a header walk; a damaged index is not used, the copy walked again."""
    path, files = _stock(tmp_path, n=80)
    cache = SeekableCache(tmp_path / "cache")
    made = open_archive(path, seekable_cache=cache)
    copy = made.seekable_copy.path  # type: ignore[attr-defined]
    kept = Path(index_path(copy))
    assert kept.is_file() and made.format == "tar"
    walked_rows = open_archive(copy).rows  # type: ignore[attr-defined]

    def no_walk(*_: object) -> None:
        raise AssertionError("the copy was walked")

    with monkeypatch.context() as m:
        m.setattr("cdml_edge.archive.tar.read.PreadScanner", no_walk)
        again = open_archive(path, seekable_cache=cache)
    assert again.seekable_copy.reused and again.rows == walked_rows  # type: ignore[attr-defined]
    assert {n: again.read(n) for n in again.names()} == files
    raw = bytearray(kept.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one bit of an offset or a name: the CRC says so
    kept.write_bytes(bytes(raw))
    healed = open_archive(path, seekable_cache=cache)
    assert healed.rows == walked_rows and kept.read_bytes() != bytes(raw)  # type: ignore[attr-defined]
    assert {n: healed.read(n) for n in healed.names()} == files


def test_no_index_kept_for_links_and_none_left_by_eviction(tmp_path: Path) -> None:
    src = tmp_path / "tree"
    _tree(src, n=20)
    os.symlink("empty.txt", src / "sym")
    linked = tmp_path / "linked.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(linked), "-C", str(src), "."], check=True)
    cache = SeekableCache(tmp_path / "cache")
    copy = open_archive(linked, seekable_cache=cache).seekable_copy.path  # type: ignore[attr-defined]
    assert not Path(index_path(copy)).exists()
    again = open_archive(linked, seekable_cache=cache)
    assert again.seekable_copy.reused and "./sym" in again.skipped()  # type: ignore[attr-defined]
    a, _ = _stock(tmp_path, seed=6, n=20)
    b, _ = _stock(tmp_path, seed=7, n=20)
    probe = open_archive(a, seekable_cache=SeekableCache(tmp_path / "probe"))
    size = probe.seekable_copy.bytes  # type: ignore[attr-defined]
    small = SeekableCache(tmp_path / "small", max_bytes=size + size // 2)  # room for one copy
    first = open_archive(a, seekable_cache=small).seekable_copy.path  # type: ignore[attr-defined]
    assert Path(index_path(first)).is_file()
    newer = open_archive(b, seekable_cache=small).seekable_copy.path  # type: ignore[attr-defined]
    names = sorted(p.name for p in small.root.iterdir())  # the evicted copy's index went too
    assert names == sorted([Path(newer).name, Path(index_path(newer)).name])


def test_a_copy_whose_blocks_exceed_the_bound_is_not_kept(tmp_path: Path) -> None:
    """Its length fits the bound, its whole blocks do not: it would hold the folder above it."""
    a, _ = _stock(tmp_path, seed=2, n=60)
    probe = open_archive(a, seekable_cache=SeekableCache(tmp_path / "probe"))
    size = probe.seekable_copy.bytes  # type: ignore[attr-defined]
    if size % block_size(tmp_path) == 0:
        pytest.skip("the copy is a whole number of blocks")
    cache = SeekableCache(tmp_path / "cache", max_bytes=size)
    open_archive(a, seekable_cache=cache)
    used = sum(p.lstat().st_blocks * 512 for p in _copies(cache))
    assert Path(probe.seekable_copy.path).name not in [p.name for p in _copies(cache)]  # type: ignore[attr-defined]
    assert cache.total_bytes() <= cache.max_bytes and used <= cache.max_bytes


def test_open_archive_takes_the_settings_a_dataset_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``True``: the configured folder; a path: that folder; ``False`` / ``None``: none."""
    path, files = _stock(tmp_path, n=8)
    monkeypatch.setenv("CDML_EDGE_SEEKABLE_CACHE", str(tmp_path / "from-env"))
    settings = ((True, "from-env"), (tmp_path / "given", "given"), (str(tmp_path / "s"), "s"))
    for setting, folder in settings:
        with open_archive(path, seekable_cache=setting) as opened:
            copy = opened.seekable_copy  # type: ignore[attr-defined]
            assert copy is not None and Path(copy.path).parent == tmp_path / folder
            assert opened.read("ok/0000.bin") == files["ok/0000.bin"]
    for off in (False, None):
        with open_archive(path, seekable_cache=off) as opened:
            assert getattr(opened, "seekable_copy", None) is None
            assert opened.read("ok/0000.bin") == files["ok/0000.bin"]


def test_files_the_cache_did_not_write_are_never_evicted(tmp_path: Path) -> None:
    """A folder shared with the user's own archives: only the cache's copies are counted."""
    path, files = _stock(tmp_path, n=8)
    shared = tmp_path / "shared"
    shared.mkdir()
    theirs = {name: os.urandom(1 << 20) for name in ("my-backup.tar", "notes.tar.zst")}
    for name, data in theirs.items():
        (shared / name).write_bytes(data)
        os.utime(shared / name, (1, 1))  # older than any copy
    (shared / "mine.tar.idx").write_bytes(b"not an index of ours")
    cache = SeekableCache(shared, max_bytes=4_000_000)  # the copy fits, with theirs it does not
    with open_archive(path, seekable_cache=cache) as opened:
        assert opened.read("ok/0000.bin") == files["ok/0000.bin"]
    assert all((shared / n).read_bytes() == d for n, d in theirs.items())
    assert (shared / "mine.tar.idx").exists()
    assert cache.total_bytes() > 0  # the copy just made is all it counts


@pytest.mark.parametrize("bad", ["", "  ", 0, 1, 2.5, b"folder"])
def test_a_seekable_cache_setting_that_names_nothing_is_refused(
    tmp_path: Path, bad: object
) -> None:
    path, _ = _stock(tmp_path, n=4)
    with pytest.raises(ValueError, match="seekable_cache"):
        open_archive(path, seekable_cache=bad)


def test_off_turns_the_cache_off_as_the_variable_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _stock(tmp_path, n=4)
    monkeypatch.chdir(tmp_path)
    for off in ("off", "OFF"):
        with open_archive(path, seekable_cache=off) as opened:
            assert getattr(opened, "seekable_copy", None) is None
    assert not (tmp_path / "off").exists()
