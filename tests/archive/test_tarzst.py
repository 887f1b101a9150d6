"""tar.zst and tar reading on both engines: our seekable writer, tar --zstd, plain tar."""

from __future__ import annotations

import io
import pickle
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zstandard
from helpers.archives import CountingSource, tar_bytes
from helpers.paths import DATA

from cdml_edge.archive import (
    CorruptArchiveError,
    TruncatedArchiveError,
    open_archive,
    pack,
    write_archive,
)
from cdml_edge.archive.source import FileSource, MemorySource
from cdml_edge.archive.tar import seekable
from cdml_edge.archive.tar.seekable import read_seekable_tail

pytestmark = pytest.mark.usefixtures("engine")


def _items(n: int = 120, seed: int = 2) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    items = [(f"win/{i:04d}.json", b'{"v": %d}\n' % i * rng.randrange(1, 400)) for i in range(n)]
    items += [
        ("big/multi-frame.bin", rng.randbytes(3_300_000)),  # spans several frames
        ("empty", b""),
        ("x" * 150 + "/long-name.txt", b"pax path"),  # needs a pax header
        ("ünï/名前.txt", b"utf-8 name"),
    ]
    return items


def test_seekable_roundtrip_and_stock_tools(tmp_path: Path) -> None:
    items = _items()
    path = tmp_path / "a.tar.zst"
    write_archive(path, items, mtime=1_600_000_000, manifest={"window": "w-1"})
    listed = subprocess.run(
        f"zstd -dc '{path}' | tar -t", shell=True, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert listed == [n for n, _ in items] + ["manifest.json"]
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(f"zstd -dc '{path}' | tar -x -C '{out}'", shell=True, check=True)
    for n, d in items:
        assert (out / n).read_bytes() == d
    arc = open_archive(path)
    assert arc.format == "tar.zst" and arc.seekable  # type: ignore[attr-defined]
    assert arc.names() == [n for n, _ in items] + ["manifest.json"]
    for n, d in items:
        assert arc.read(n) == d
    names = [n for n, _ in items]
    rng = random.Random(5)
    rng.shuffle(names)
    assert arc.read_many(names) == [dict(items)[n] for n in names]
    assert arc.verify() == []
    info = arc.info("big/multi-frame.bin")
    assert info.method == "zstd" and info.size == 3_300_000 and info.mtime == 1_600_000_000
    assert info.checksum is not None
    assert pickle.loads(pickle.dumps(arc)).read("empty") == b""


def test_open_reads_only_the_tail_and_reads_only_needed_frames(tmp_path: Path) -> None:
    rng = random.Random(9)
    items = [(f"m/{i:05d}.txt", rng.randbytes(2000).hex().encode()) for i in range(3000)]
    path = tmp_path / "s.tar.zst"
    write_archive(path, items)
    size = path.stat().st_size
    src = CountingSource(FileSource(path))
    arc = open_archive(src)
    assert len(src.calls) <= 2
    src.calls.clear()
    assert arc.read("m/01234.txt") == items[1234][1]
    assert [k for k, _ in src.calls] == ["pread"]
    assert src.bytes_read() < 200_000 < size // 10  # one frame, not the archive
    src.calls.clear()
    picks = [f"m/{i:05d}.txt" for i in (7, 2999, 1500, 8)]
    assert arc.read_many(picks) == [items[int(p[2:7])][1] for p in picks]
    assert [k for k, _ in src.calls] == ["pread_many"]
    assert src.calls[0][1] == sorted(src.calls[0][1])


def test_tail_index_frames_are_consistent() -> None:
    data = pack(_items(30), format="tar.zst")
    tail = read_seekable_tail(MemorySource(data))
    assert tail is not None and tail.index is not None
    frames = tail.frames
    assert frames.coff[-1] < len(data) and frames.count >= 2
    # every frame is an independent zstd frame that decompresses on its own
    for k in range(frames.count):
        blob = data[frames.coff[k] : frames.coff[k + 1]]
        assert len(zstandard.ZstdDecompressor().decompress(blob)) == (
            frames.doff[k + 1] - frames.doff[k]
        )


def _tree(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path / "tree"
    (src / "d").mkdir(parents=True)
    rng = random.Random(4)
    files = {f"d/f{i}.txt": b"row,%d\n" % i * rng.randrange(1, 2000) for i in range(25)}
    files["blob.bin"] = rng.randbytes(200_000)
    files["n" * 120 + ".txt"] = b"gnu long name"
    for n, d in files.items():
        (src / n).write_bytes(d)
    return src, files


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_plain_tar_zst_from_tar(tmp_path: Path, fmt: str) -> None:
    src, files = _tree(tmp_path)
    if fmt == "ustar":
        files.pop("n" * 120 + ".txt")
        (src / ("n" * 120 + ".txt")).unlink()
    out = tmp_path / "t.tar.zst"
    subprocess.run(
        ["tar", f"--format={fmt}", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True
    )
    arc = open_archive(out)
    assert arc.format == "tar.zst" and not arc.seekable  # type: ignore[attr-defined]
    want = dict(files)  # tar stores ./name; every reader serves the normal name
    assert sorted(arc.names()) == sorted(want)
    assert arc.read("./blob.bin") == files["blob.bin"]  # the stored name still reads
    for n, d in want.items():
        assert arc.read(n) == d
        assert arc.info(n).checksum is None
    order = sorted(want, reverse=True)
    assert arc.read_many(order) == [want[n] for n in order]
    assert arc.verify() == []
    plain = tmp_path / "t.tar"
    subprocess.run(["tar", f"--format={fmt}", "-cf", str(plain), "-C", str(src), "."], check=True)
    tar = open_archive(plain)
    assert tar.format == "tar" and dict(tar) == want


def test_tarfile_written_archives() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(5):
            data = b"tarfile %d" % i * 100
            info = tarfile.TarInfo(f"p/é{i}.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("p/dir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
    raw = buf.getvalue()
    arc = open_archive(raw)
    assert arc.names() == [f"p/é{i}.txt" for i in range(5)]
    zst = zstandard.ZstdCompressor().compress(raw)
    assert open_archive(zst).read("p/é3.txt") == b"tarfile 3" * 100


def test_corrupt_frame_is_detected() -> None:
    items = _items(40)
    data = bytearray(pack(items, format="tar.zst"))
    tail = read_seekable_tail(MemorySource(bytes(data)))
    assert tail is not None
    victim = data[tail.frames.coff[1] : tail.frames.coff[2]]
    data[tail.frames.coff[1] + len(victim) // 2] ^= 0x04
    arc = open_archive(bytes(data))
    bad = arc.verify()
    assert bad, "a flipped bit in a frame went unnoticed"
    with pytest.raises(CorruptArchiveError) as exc:
        arc.read(bad[0])
    assert exc.value.archive == "<memory>"


def test_crc_catches_wrong_bytes() -> None:
    # frames that decode fine but to other bytes than the index's CRC-32 says
    items = [("a.txt", b"A" * 1000), ("b.txt", b"B" * 1000)]
    data = pack(items, format="tar.zst")
    tail = read_seekable_tail(MemorySource(data))
    assert tail is not None and tail.index is not None
    stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    plain = stream.read().replace(b"A" * 10, b"Z" * 10, 1)
    frame = zstandard.ZstdCompressor().compress(plain)
    records = [
        (r.name, r.header_offset, r.data_offset, r.size, r.mtime, r.crc or 0, 0, 0)
        for r in tail.index
    ]
    forgery = (
        frame
        + seekable.index_frame(records)
        + seekable.seek_table_frame([(len(frame), len(plain))])
    )
    arc = open_archive(forgery)
    with pytest.raises(CorruptArchiveError, match="CRC-32") as exc:
        arc.read("a.txt")
    assert exc.value.member == "a.txt"
    assert arc.read("b.txt") == b"B" * 1000
    assert arc.verify() == ["a.txt"]


def test_truncated_tar_zst(tmp_path: Path) -> None:
    items = _items(20)
    data = pack(items, format="tar.zst")
    # the seek table is cut: the frames are still whole, so one pass rebuilds the index
    arc = open_archive(data[:-5])
    assert not arc.seekable  # type: ignore[attr-defined]
    assert dict(arc) == dict(items)
    for cut in (len(data) // 2, 100):
        with pytest.raises(TruncatedArchiveError):
            open_archive(data[:cut])
    src, _ = _tree(tmp_path)
    out = tmp_path / "p.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
    with pytest.raises(TruncatedArchiveError):
        open_archive(out.read_bytes()[: out.stat().st_size // 2])


def _rle_tar_zst(member_bytes: int) -> bytes:
    """A single-frame tar.zst of one member of ``member_bytes`` made of 4-byte RLE blocks."""
    info = tarfile.TarInfo("big.bin")
    info.size = member_bytes
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # no content size, 128 KiB window
    frame += (len(header) << 3).to_bytes(3, "little") + header  # a raw block
    block = 128 << 10
    for _ in range(member_bytes // block):
        frame += ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"a"
    frame += ((1024 << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\0"  # end of archive
    return bytes(frame)


def test_plain_tar_zst_index_pass_memory_is_bounded(tmp_path: Path) -> None:
    """Indexing a tiny tar.zst that expands to 256 MiB keeps memory bounded."""
    path = tmp_path / "rle.tar.zst"
    data = _rle_tar_zst(256 << 20)
    assert len(data) < 10_000
    path.write_bytes(data)
    code = (
        "import resource, sys\n"
        "from cdml_edge.archive import open_archive\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "arc = open_archive(sys.argv[1])\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(arc.names(), arc.info('big.bin').size, (peak - base) // 1024)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    names, size, grown_mib = out.stdout.rsplit(" ", 2)
    assert names == "['big.bin']" and int(size) == 256 << 20
    assert int(grown_mib) < 100, f"open grew RSS by {grown_mib} MiB"


def test_fuzz_found_seek_table_without_frames_is_a_typed_error() -> None:
    """A mutated seekable tar.zst whose seek table lost its frames (found by the fuzz test)."""
    from cdml_edge.archive import ArchiveError, open_archive

    data = (DATA / "fuzz_tarzst_no_frames.bin").read_bytes()
    try:
        archive = open_archive(data)
    except ArchiveError:
        return  # refused at open: fine
    with archive:
        assert archive.read_many([]) == []
        for name in archive.names():
            try:
                archive.read(name)
            except ArchiveError as exc:
                assert name in str(exc) or exc.member == name
        assert isinstance(archive.verify(), list)


def _layout_v1_items() -> list[tuple[str, bytes]]:
    """What ``tests/data/tarzst_layout_v1.tar.zst`` holds (before manifest.json)."""
    items = [
        (f"rows/{i:03d}.csv", b"".join(b"%d,%d,%d\n" % (i, j, i * j % 97) for j in range(40 + i)))
        for i in range(40)
    ]
    items += [
        ("empty.bin", b""),
        ("big/pattern.txt", b"".join(b"r%04d\n" % k for k in range(1500)) * 140),  # 2+ frames
        ("ünï/名前.txt", b"utf-8 name"),
        ("p" * 120 + "/long.txt", b"pax path"),
    ]
    return items


def test_archive_of_the_earlier_layout_stays_readable() -> None:
    """Written by the writer whose seek table left the member index out (committed file)."""
    path = DATA / "tarzst_layout_v1.tar.zst"
    data = path.read_bytes()
    count = int.from_bytes(data[-9:-5], "little")
    tail = read_seekable_tail(MemorySource(data))
    assert tail is not None and tail.index is not None
    assert count == tail.frames.count  # no entry for the index: the earlier layout
    src = CountingSource(FileSource(path))
    arc = open_archive(src)
    assert len(src.calls) <= 2 and arc.seekable  # type: ignore[attr-defined]
    items = _layout_v1_items()
    assert arc.names() == [n for n, _ in items] + ["manifest.json"]
    assert [arc.read(n) for n, _ in items] == [d for _, d in items]
    assert arc.verify() == []
    assert arc.info("big/pattern.txt").mtime == 1_700_000_000


def test_member_index_is_an_entry_of_the_seek_table() -> None:
    data = pack(_items(30), format="tar.zst")
    count = int.from_bytes(data[-9:-5], "little")
    table = data[-(8 + count * 8 + 9) : -9]
    entries = [
        (
            int.from_bytes(table[8 + 8 * k : 12 + 8 * k], "little"),
            int.from_bytes(table[12 + 8 * k : 16 + 8 * k], "little"),
        )
        for k in range(count)
    ]
    assert sum(c for c, _ in entries) == len(data) - len(table) - 9  # every byte accounted for
    tail = read_seekable_tail(MemorySource(data))
    assert tail is not None and tail.index is not None
    index_frame = len(data) - (8 + count * 8 + 9) - tail.data_end
    assert tail.frames.count == count - 1 and entries[-1] == (index_frame, 0)


def test_seek_table_over_the_tail_read_still_opens_in_two_requests() -> None:
    items = [(f"f/{i:05d}", b"%05d" % i) for i in range(20_000)]
    data = pack(items, format="tar.zst", frame_bytes=512)  # one frame per member
    tail = read_seekable_tail(MemorySource(data))
    assert tail is not None and tail.frames.count * 8 > (1 << 17)
    src = CountingSource(MemorySource(data))
    arc = open_archive(src)
    assert len(src.calls) <= 2 and arc.seekable  # type: ignore[attr-defined]
    assert arc.read("f/12345") == b"12345"


def test_skippable_frames_between_the_data_frames() -> None:
    """A seekable file from another writer: a member straddles frames around a skippable one."""
    plain = tar_bytes([(f"m{i}.txt", b"member %d " % i * 300) for i in range(6)])
    cuts = [0, 2000, 5000, len(plain)]
    cctx = zstandard.ZstdCompressor()
    frames = [cctx.compress(plain[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    skip = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"notes"
    parts = [frames[0], skip, frames[1], skip, frames[2]]
    sizes = [
        (len(frames[0]), 2000),
        (len(skip), 0),
        (len(frames[1]), 3000),
        (len(skip), 0),
        (len(frames[2]), len(plain) - 5000),
    ]
    data = b"".join(parts) + seekable.seek_table_frame(sizes)
    arc = open_archive(data)
    assert arc.seekable  # type: ignore[attr-defined]
    want = {f"m{i}.txt": b"member %d " % i * 300 for i in range(6)}
    assert {n: arc.read(n) for n in arc.names()} == want
    back = sorted(want, reverse=True)
    assert arc.read_many(back) == [want[n] for n in back]
