"""ZIP reading on both engines: formats written by us, by zipfile and by Info-ZIP."""

from __future__ import annotations

import io
import os
import pickle
import random
import struct
import subprocess
import threading
import zipfile
import zlib
from pathlib import Path

import pytest
from helpers.archives import CountingSource, raw_zip

from cdml_edge.archive import (
    ArchiveError,
    CorruptArchiveError,
    MemberTooLargeError,
    TruncatedArchiveError,
    UnsafeMemberError,
    UnsupportedArchiveError,
    open_archive,
    pack,
    write_archive,
)
from cdml_edge.archive.scan import scan_archive
from cdml_edge.archive.source import FileSource, MemorySource
from cdml_edge.errors import CdmlError

pytestmark = pytest.mark.usefixtures("engine")


def _items(n: int = 40, seed: int = 1) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    items = [(f"data/part{i:03d}.csv", b"t,v\n" * rng.randrange(1, 900)) for i in range(n)]
    items += [
        ("photo.jpg", rng.randbytes(5000)),
        ("empty.txt", b""),
        ("ünïcode/名前.json", '{"a": "é"}'.encode()),
        ("random.bin", rng.randbytes(70_000)),
    ]
    return items


def test_roundtrip_and_api(tmp_path: Path) -> None:
    items = _items()
    path = tmp_path / "w.zip"
    write_archive(path, items, mtime=1_700_000_000)
    assert subprocess.run(["unzip", "-tq", str(path)], capture_output=True).returncode == 0
    with zipfile.ZipFile(path) as zf:
        assert zf.read("random.bin") == items[-1][1]
        assert zf.getinfo("photo.jpg").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("data/part000.csv").compress_type == zipfile.ZIP_DEFLATED
    for src in (path, str(path), path.read_bytes(), memoryview(path.read_bytes())):
        with open_archive(src) as arc:
            assert arc.format == "zip"
            assert arc.names() == [n for n, _ in items]
            for n, d in items:
                assert arc.read(n) == d
            rev = [n for n, _ in items][::-1]
            assert arc.read_many(rev) == [d for _, d in items][::-1]
            assert dict(arc) == dict(items)
            assert arc.verify() == []
            info = arc.info("data/part001.csv")
            assert info.method == "deflate" and info.size == len(items[1][1])
            assert info.checksum == zlib.crc32(items[1][1])
            assert info.mtime == 1_700_000_000
            assert arc.info("photo.jpg").method == "stored"
            with pytest.raises(KeyError, match="nope"):
                arc.read("nope")


def test_file_object_source(tmp_path: Path) -> None:
    path = tmp_path / "f.zip"
    write_archive(path, _items(5))
    with open(path, "rb") as f:
        f.seek(7)
        arc = open_archive(f)
        assert arc.read("empty.txt") == b""
        assert f.tell() == 7  # positional reads leave the caller's offset alone
        assert pickle.loads(pickle.dumps(arc)).read("photo.jpg") == arc.read("photo.jpg")
    buf = io.BytesIO(path.read_bytes())
    assert open_archive(buf).read("data/part002.csv") == _items(5)[2][1]


def _info_zip_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    rng = random.Random(3)
    for i in range(12):
        (src / "sub" / f"f{i}.txt").write_bytes(b"line %d\n" % i * rng.randrange(1, 3000))
    (src / "blob.bin").write_bytes(rng.randbytes(30_000))
    return src


@pytest.mark.parametrize("how", ["file", "stream", "bzip2", "store"])
def test_info_zip_archives(tmp_path: Path, how: str) -> None:
    src = _info_zip_tree(tmp_path)
    out = tmp_path / "z.zip"
    if how == "stream":  # written to a pipe: local headers use data descriptors
        res = subprocess.run(["zip", "-qr", "-", "."], cwd=src, capture_output=True, check=True)
        out.write_bytes(res.stdout)
    else:
        opt = {"file": [], "bzip2": ["-Z", "bzip2"], "store": ["-0"]}[how]
        subprocess.run(["zip", "-qr", *opt, str(out), "."], cwd=src, check=True)
    expected = {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    arc = open_archive(out)
    assert sorted(arc.names()) == sorted(expected)  # directories are left out
    if how == "stream":
        with zipfile.ZipFile(out) as zf:
            assert all(i.flag_bits & 0x8 for i in zf.infolist() if not i.is_dir())
    for name, data in expected.items():
        assert arc.read(name) == data
    assert arc.read_many(sorted(expected)) == [expected[n] for n in sorted(expected)]
    assert arc.verify() == []


def test_zip64_many_members_and_forced(tmp_path: Path) -> None:
    n = 70_000
    path = tmp_path / "many.zip"
    write_archive(path, ((f"m/{i}", b"%d" % i) for i in range(n)))
    raw = path.read_bytes()
    assert b"PK\x06\x06" in raw[-200:]  # a ZIP64 end record was needed
    with zipfile.ZipFile(path) as zf:
        assert len(zf.namelist()) == n and zf.read("m/69999") == b"69999"
    src = CountingSource(FileSource(path))
    arc = open_archive(src)
    assert len(src.calls) <= 2  # the tail, then the central directory
    assert len(arc) == n and arc.read("m/12345") == b"12345"
    # zipfile's forced ZIP64 extra fields on a small member
    p2 = tmp_path / "forced.zip"
    with (
        zipfile.ZipFile(p2, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("big.txt", "w", force_zip64=True) as f,
    ):
        f.write(b"abc" * 10_000)
    assert open_archive(p2).read("big.txt") == b"abc" * 10_000


class _VirtualZip64:
    """A ByteSource holding one 5 GiB stored member of zeros without storing it."""

    SIZE = 5 << 30

    def __init__(self) -> None:
        name = b"huge.bin"
        z64_local = struct.pack("<HHQQ", 1, 16, self.SIZE, self.SIZE)
        self.head = struct.pack(
            "<4s2B4HL2L2H",
            b"PK\x03\x04",
            45,
            0,
            0,
            0,
            0,
            0x5021,
            0,
            0xFFFFFFFF,
            0xFFFFFFFF,
            len(name),
            len(z64_local),
        )
        self.head += name + z64_local
        cd_off = len(self.head) + self.SIZE
        z64 = struct.pack("<HHQQ", 1, 16, self.SIZE, self.SIZE)
        cd = (
            struct.pack(
                "<4s4B4HL2L5H2L",
                b"PK\x01\x02",
                45,
                3,
                45,
                0,
                0,
                0,
                0,
                0x5021,
                0,
                0xFFFFFFFF,
                0xFFFFFFFF,
                len(name),
                len(z64),
                0,
                0,
                0,
                0,
                0,
            )
            + name
            + z64
        )
        rec = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, len(cd), cd_off)
        loc = struct.pack("<4sLQL", b"PK\x06\x07", 0, cd_off + len(cd), 1)
        eocd = struct.pack(
            "<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0
        )
        self.tail = cd + rec + loc + eocd
        self.tail_at = cd_off

    name = "<virtual zip64>"

    def size(self) -> int:
        return self.tail_at + len(self.tail)

    def pread(self, offset: int, length: int) -> bytes:
        out = bytearray()
        end = min(offset + length, self.size())
        pos = offset
        while pos < end:
            if pos < len(self.head):
                chunk = self.head[pos : min(end, len(self.head))]
            elif pos < self.tail_at:
                chunk = bytes(min(end, self.tail_at) - pos)
            else:
                chunk = self.tail[pos - self.tail_at : end - self.tail_at]
            out += chunk
            pos += len(chunk)
        return bytes(out)

    def pread_many(self, ranges):  # type: ignore[no-untyped-def]
        return [self.pread(o, n) for o, n in ranges]

    def fileno(self) -> None:
        return None

    def close(self) -> None:
        pass


def test_member_over_4gib_is_indexed_and_capped() -> None:
    arc = open_archive(_VirtualZip64())
    info = arc.info("huge.bin")
    assert info.size == 5 << 30 and info.compressed_size == 5 << 30
    with pytest.raises(MemberTooLargeError) as exc:
        arc.read("huge.bin")
    assert exc.value.member == "huge.bin" and "max_member_bytes" in str(exc.value)


def test_zstd_member_method_93() -> None:
    data = b"zstd inside zip " * 500
    arc = open_archive(raw_zip([(b"z.txt", data, 93), (b"d.txt", b"deflated" * 9, 8)]))
    assert arc.info("z.txt").method == "zstd"
    assert arc.read("z.txt") == data
    assert arc.read_many(["d.txt", "z.txt"]) == [b"deflated" * 9, data]


def test_legacy_and_unicode_extra_names() -> None:
    cp437 = "café.txt".encode("cp437")  # not flagged UTF-8, not valid UTF-8
    arc = open_archive(raw_zip([(cp437, b"x", 0)]))
    assert arc.names() == ["café.txt"]
    flagged = open_archive(raw_zip([("naïve.txt".encode(), b"y", 0)], flags=0x800))
    assert flagged.names() == ["naïve.txt"]
    legacy = "Ölfeld.txt".encode("cp437")
    upath = struct.pack("<BL", 1, zlib.crc32(legacy)) + "Ölfeld-✓.txt".encode()
    extra = struct.pack("<HH", 0x7075, len(upath)) + upath
    arc = open_archive(raw_zip([(legacy, b"z", 0)], extra=extra))
    assert arc.names() == ["Ölfeld-✓.txt"] and arc.read("Ölfeld-✓.txt") == b"z"


def test_crc_mismatch_is_named() -> None:
    data = raw_zip([(b"good.txt", b"fine", 0), (b"bad.txt", b"payload" * 50, 8)])
    corrupt = bytearray(data)
    pos = corrupt.index(b"bad.txt") + len(b"bad.txt") + 3  # inside the deflate data
    corrupt[pos] ^= 0x10
    arc = open_archive(bytes(corrupt))
    assert arc.read("good.txt") == b"fine"
    with pytest.raises(CorruptArchiveError) as exc:
        arc.read("bad.txt")
    assert exc.value.member == "bad.txt" and exc.value.archive == "<memory>"
    assert "bad.txt" in str(exc.value) and "<memory>" in str(exc.value)
    assert arc.verify() == ["bad.txt"]
    wrong_crc = open_archive(raw_zip([(b"c.txt", b"abc", 0)], crc_override=123))
    with pytest.raises(CorruptArchiveError, match="CRC-32"):
        wrong_crc.read("c.txt")


def test_declared_size_is_not_trusted() -> None:
    # the central directory says 10 bytes; the deflate stream holds 1 MB
    lying = raw_zip([(b"bomb.txt", b"\x00" * 1_000_000, 8)], usize_override=10)
    with pytest.raises(CorruptArchiveError, match="size"):
        open_archive(lying).read("bomb.txt")
    short = raw_zip([(b"s.txt", b"abc", 8)], usize_override=5000)
    with pytest.raises(CorruptArchiveError):
        open_archive(short).read("s.txt")


def test_limits_cap_size_and_ratio() -> None:
    zeros = pack([("zeros.bin", b"\x00" * (8 << 20))])
    assert len(open_archive(zeros).read("zeros.bin")) == 8 << 20
    with pytest.raises(MemberTooLargeError, match="ratio"):
        open_archive(zeros, max_ratio=100).read("zeros.bin")
    with pytest.raises(MemberTooLargeError, match="max_member_bytes"):
        open_archive(zeros, max_member_bytes=1 << 20).read("zeros.bin")


def test_truncated_and_garbage() -> None:
    good = pack(_items(10))
    with pytest.raises(ArchiveError):
        open_archive(good[: len(good) // 2])
    with pytest.raises(UnsupportedArchiveError):
        open_archive(b"hello, not an archive at all" * 40)
    # bytes cut from inside a member: the directory now lies before where it says it is
    data = raw_zip([(b"a.bin", os.urandom(5000), 0)])
    with pytest.raises(TruncatedArchiveError):
        open_archive(data[:100] + data[5000 + 30 + 5 :])
    # a member whose data runs past the end of the file
    big = bytearray(raw_zip([(b"a.bin", b"x" * 100, 8)]))
    cd = big.index(b"PK\x01\x02")
    struct.pack_into("<L", big, cd + 20, 90_000)
    with pytest.raises(TruncatedArchiveError) as exc:
        open_archive(bytes(big)).read("a.bin")
    assert exc.value.member == "a.bin"
    tail_cut = pack(_items(3))[:-10]
    with pytest.raises(ArchiveError):
        open_archive(tail_cut)


def test_prepended_stub() -> None:
    items = _items(4)
    arc = open_archive(b"#!/bin/sh\necho self-extracting\n" * 20 + pack(items))
    assert dict(arc) == dict(items)


def test_unsupported_methods_and_encryption() -> None:
    enc = open_archive(raw_zip([(b"secret", b"x", 0)], flags=0x1))
    with pytest.raises(UnsupportedArchiveError, match="encrypted"):
        enc.read("secret")
    odd = bytearray(raw_zip([(b"odd", b"y", 0)]))
    # patch the method in the central record to 99 (AES)
    cd = odd.index(b"PK\x01\x02")
    odd[cd + 10 : cd + 12] = struct.pack("<H", 99)
    with pytest.raises(UnsupportedArchiveError) as exc:
        open_archive(bytes(odd)).read("odd")
    assert exc.value.member == "odd"


def test_requests_are_frugal(tmp_path: Path) -> None:
    items = _items(60)
    path = tmp_path / "r.zip"
    write_archive(path, items)
    src = CountingSource(FileSource(path))
    arc = open_archive(src)
    opened = len(src.calls)
    assert opened <= 2
    src.calls.clear()
    arc.read("data/part005.csv")
    assert [k for k, _ in src.calls] == ["pread"]
    src.calls.clear()
    names = [n for n, _ in items][::-3]
    assert arc.read_many(names) == [dict(items)[n] for n in names]
    assert [k for k, _ in src.calls] == ["pread_many"]
    ranges = src.calls[0][1]
    assert ranges == sorted(ranges)  # neighbours can be coalesced by the source


def test_threads_and_pickle(tmp_path: Path) -> None:
    items = _items(80)
    path = tmp_path / "t.zip"
    write_archive(path, items)
    arc = open_archive(path)
    want = dict(items)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(200):
                names = rng.sample(list(want), 5)
                assert arc.read_many(names) == [want[n] for n in names]
                n = rng.choice(list(want))
                assert arc.read(n) == want[n]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    clone = pickle.loads(pickle.dumps(arc))
    assert clone.names() == arc.names() and clone.read("random.bin") == want["random.bin"]
    mem = pickle.loads(pickle.dumps(open_archive(path.read_bytes())))
    assert isinstance(mem.source, MemorySource) and mem.read("empty.txt") == b""


def test_pickled_archive_reopens_as_its_format_on_the_receivers_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.zip"
    write_archive(path, _items(5))
    state = pickle.dumps(open_archive(path, max_member_bytes=1 << 20))
    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")  # the receiving process chooses its engine
    clone = pickle.loads(state)
    assert clone.format == "zip" and clone.engine == "python"
    assert clone.max_member_bytes == 1 << 20 and clone.read("empty.txt") == b""


def test_archive_errors_are_cdml_errors_and_pickle_with_their_fields() -> None:
    err = CorruptArchiveError("CRC-32 mismatch", archive="a.zip", member="m.bin")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, CdmlError) and type(again) is CorruptArchiveError
    assert (again.archive, again.member, again.reason) == ("a.zip", "m.bin", "CRC-32 mismatch")
    assert str(again) == str(err) == "a.zip: m.bin: CRC-32 mismatch"


def test_fork_after_parent_read(tmp_path: Path) -> None:
    items = _items(20)
    path = tmp_path / "fork.zip"
    write_archive(path, items)
    arc = open_archive(path)
    assert arc.read("data/part003.csv") == items[3][1]  # the parent's descriptor is open
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: read everything through the inherited Archive
        ok = dict(arc) == dict(items) and arc.verify() == []
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert arc.read("random.bin") == items[-1][1]


def test_closed_archive_refuses_reads() -> None:
    arc = open_archive(pack(_items(2)))
    arc.close()
    with pytest.raises(ArchiveError, match="closed"):
        arc.read("empty.txt")


def test_truncated_error_type() -> None:
    data = raw_zip([(b"a", b"q" * 100, 0)])
    eocd = data.rindex(b"PK\x05\x06")
    cut = bytearray(data)
    struct.pack_into("<L", cut, eocd + 12, 5000)  # central directory larger than the file
    with pytest.raises(TruncatedArchiveError):
        open_archive(bytes(cut))


ZLIB_CHECK = r"""
import sys, zlib
from cdml_edge.archive import CorruptArchiveError, open_archive, pack
from cdml_edge.archive.native import describe
assert "inflate: zlib" in describe(), describe()
items = [("a.txt", b"zlib path " * 3000), ("b.bin", bytes(range(256)) * 40)]
arc = open_archive(pack(items))
assert dict(arc) == dict(items)
bad = bytearray(pack(items))
bad[60] ^= 0x40
try:
    open_archive(bytes(bad)).read("a.txt")
except CorruptArchiveError as exc:
    assert exc.member == "a.txt"
else:
    sys.exit("corruption not detected")
print("ok")
"""


def test_zlib_inflate_when_libdeflate_is_off(tmp_path: Path) -> None:
    import sys

    env = dict(os.environ, CDML_EDGE_NO_LIBDEFLATE="1")
    env.pop("CDML_EDGE_NATIVE", None)
    res = subprocess.run(
        [sys.executable, "-c", ZLIB_CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_directories_left_out_and_later_duplicate_wins() -> None:
    data = raw_zip(
        [(b"d/", b"", 0), (b"a", b"first", 0), (b"d/b", b"bee", 8), (b"a", b"second", 0)]
    )
    arc = open_archive(data)
    assert arc.names() == ["a", "d/b"]
    assert arc.read("a") == b"second" and arc.read_many(["d/b", "a"]) == [b"bee", b"second"]
    assert dict(arc) == {"a": b"second", "d/b": b"bee"}
    assert "d/" not in arc and len(arc) == 2


def test_stored_members_read_from_a_file(tmp_path: Path) -> None:
    """Stored members from a file, where the reader fills the result straight from disk."""
    payload = random.Random(5).randbytes(3000)
    path = tmp_path / "s.zip"
    # the central record's extra field is longer than the local one
    extra = struct.pack("<HH4s", 0xCAFE, 4, b"abcd")
    path.write_bytes(raw_zip([(b"s.bin", payload, 0)], extra=extra))
    with open_archive(path) as arc:
        assert arc.read("s.bin") == payload and arc.read_many(["s.bin", "s.bin"]) == [payload] * 2
    # the local extra field is longer than the central one
    data = bytearray(raw_zip([(b"s.bin", payload, 0), (b"one", b"1", 0)]))
    pad = struct.pack("<HH8s", 0xCAFE, 8, b"abcdefgh")
    struct.pack_into("<H", data, 28, len(pad))
    data[35:35] = pad
    cd = data.index(b"PK\x01\x02")
    second = data.index(b"PK\x01\x02", cd + 4)
    struct.pack_into("<L", data, second + 42, struct.unpack_from("<L", data, second + 42)[0] + 12)
    eocd = data.rindex(b"PK\x05\x06")
    struct.pack_into("<L", data, eocd + 16, cd)
    path.write_bytes(bytes(data))
    with open_archive(path) as arc:
        assert arc.read("s.bin") == payload and arc.read("one") == b"1"
        assert arc.read_many(["one", "s.bin"]) == [b"1", payload]
    # a wrong CRC-32 is caught on the direct path too
    path.write_bytes(raw_zip([(b"ok", b"fine", 0), (b"c.bin", payload, 0)], crc_override=7))
    with open_archive(path) as arc:
        with pytest.raises(CorruptArchiveError, match="CRC-32") as exc:
            arc.read("c.bin")
        assert exc.value.member == "c.bin"
        with pytest.raises(CorruptArchiveError, match="CRC-32"):
            arc.read_many(["c.bin"])
        assert arc.verify() == ["ok", "c.bin"]
    # data that runs past the end of the file
    data = bytearray(raw_zip([(b"t.bin", payload, 0)]))
    cd = data.index(b"PK\x01\x02")
    struct.pack_into("<2L", data, cd + 20, 90_000, 90_000)
    path.write_bytes(bytes(data))
    with open_archive(path) as arc, pytest.raises(TruncatedArchiveError) as texc:
        arc.read("t.bin")
    assert texc.value.member == "t.bin"


def _overlapping_zip(n: int, usize: int = 4 << 20) -> bytes:
    """``n`` central entries that all point at one local header and one deflate stream."""
    raw = bytes(usize)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = c.compress(raw) + c.flush()
    crc = zlib.crc32(raw)
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(comp), usize, 1, 0)
    local += b"k" + comp
    cd = b""
    for i in range(n):
        nm = b"m%03d" % i
        cd += struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            0,
            0,
            crc,
            len(comp),
            usize,
            len(nm),
            0,
            0,
            0,
            0,
            0,
            0,
        )
        cd += nm
    eocd = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(cd), len(local), 0)
    return local + cd + eocd


def test_overlapping_members_are_refused(tmp_path: Path) -> None:
    """A ZIP bomb made of entries sharing one deflate stream fails at open, naming both."""
    path = tmp_path / "overlap.zip"
    path.write_bytes(_overlapping_zip(20))
    for src in (path, path.read_bytes()):
        with pytest.raises(UnsafeMemberError, match="overlaps member 'm000'") as exc:
            open_archive(src)
        assert exc.value.member == "m001" and exc.value.archive
    # one entry overlapping the next member's local header by a single byte
    data = bytearray(raw_zip([(b"a", b"x" * 100, 0), (b"b", b"y" * 100, 0)]))
    cd = data.index(b"PK\x01\x02")
    struct.pack_into("<2L", data, cd + 20, 102, 102)  # 30 + 102 > 131, where b starts
    with pytest.raises(UnsafeMemberError, match="overlaps member 'a'"):
        open_archive(bytes(data))
    # members that only touch are fine
    assert open_archive(raw_zip([(b"a", b"x" * 100, 0), (b"b", b"y", 8)])).verify() == []


def test_duplicate_names_are_reported() -> None:
    """Reads get the last entry of a repeated name; verify() and scan name the repeats."""
    data = raw_zip(
        [(b"a", b"1", 0), (b"b", b"2", 0), (b"a", b"3", 0), (b"c", b"4", 8), (b"b", b"5", 0)]
        + [(b"d/", b"", 0), (b"d/", b"", 0)]
    )
    arc = open_archive(data)
    assert arc.names() == ["a", "b", "c"] and arc.read_many(["a", "b"]) == [b"3", b"5"]
    assert arc.duplicates() == ["a", "b"]
    assert arc.verify() == ["a", "b"]
    report = scan_archive(data)
    assert not report.ok and sorted(report.bad) == ["a", "b"]
    assert "duplicate" in report.bad["a"]
    assert open_archive(raw_zip([(b"a", b"1", 0)])).duplicates() == []
