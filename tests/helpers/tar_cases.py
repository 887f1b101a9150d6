"""Tar and tar.zst bytes built by hand, one generator per class of archive peers write.

Each builds the bytes itself (no copied files): GNU incremental headers, sparse members in
every form, links and devices, pax records other readers reject, and tar.zst files whose
seek table does not describe their frames.
"""

from __future__ import annotations

import io
import os
import struct
import tarfile
from pathlib import Path

import zstandard

GNU_MAGIC = b"ustar  \x00"
USTAR_MAGIC = b"ustar\x0000"
END = b"\x00" * 1024
MTIME = 1_700_000_000


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\x00" % (width - 1, value)


def header(
    name: bytes,
    size: int = 0,
    kind: bytes = b"0",
    *,
    magic: bytes = USTAR_MAGIC,
    link: bytes = b"",
    fields: dict[int, bytes] | None = None,
) -> bytes:
    """One 512-byte header with a right checksum; ``fields``: offset -> bytes to place."""
    b = bytearray(512)
    b[0 : len(name)] = name
    b[100:108] = _octal(0o644, 8)
    b[108:116] = _octal(0, 8)
    b[116:124] = _octal(0, 8)
    b[124:136] = _octal(size, 12)
    b[136:148] = _octal(MTIME, 12)
    b[156:157] = kind
    b[157 : 157 + len(link)] = link
    b[257:265] = magic
    for off, value in (fields or {}).items():
        b[off : off + len(value)] = value
    b[148:156] = b" " * 8
    b[148:156] = b"%06o\x00 " % sum(b)
    return bytes(b)


def pad(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 512)


def entry(name: bytes, data: bytes, kind: bytes = b"0", **kw: object) -> bytes:
    return header(name, len(data), kind, **kw) + pad(data)  # type: ignore[arg-type]


def pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n += 1
    return str(n).encode() + body


def pax(records: bytes, kind: bytes = b"x") -> bytes:
    return entry(b"PaxHeaders/x", records, kind)


# -- sparse members: the holes of a 64 KiB file with three runs of data ------------------
SPARSE_RUNS = ((0, b"A" * 700), (20_000, b"B" * 512), (40_960, b"C" * 100))
SPARSE_SIZE = 65_536
AFTER = (b"after.txt", b"the member after the sparse one\n")


def sparse_content(runs: tuple[tuple[int, bytes], ...] = SPARSE_RUNS) -> bytes:
    """What a sparse member holds once its holes are expanded."""
    out = bytearray(SPARSE_SIZE)
    for off, data in runs:
        out[off : off + len(data)] = data
    return bytes(out)


def _old_gnu_map(runs: list[tuple[int, bytes]]) -> bytes:
    return b"".join(_octal(off, 12) + _octal(len(d), 12) for off, d in runs)


def old_gnu_sparse(extension_blocks: bool, stored_extra: int = 0) -> bytes:
    """A type ``S`` member, with its map spilling into an extension block when asked.

    ``stored_extra``: bytes of data beyond what the map accounts for (a bad map).
    """
    runs = list(SPARSE_RUNS)
    if extension_blocks:  # six runs: four in the header, two in one extension block
        runs = [(k * 8192, bytes([65 + k]) * 300) for k in range(6)]
    stored = b"".join(d for _, d in runs) + b"x" * stored_extra
    head, rest = runs[:4], runs[4:]
    fields = {386: _old_gnu_map(head), 483: _octal(SPARSE_SIZE, 12)}
    if rest:
        fields[482] = b"\x01"
    out = header(b"sparse.bin", len(stored), b"S", magic=GNU_MAGIC, fields=fields)
    if rest:
        ext = bytearray(512)
        ext[0 : 24 * len(rest)] = _old_gnu_map(rest)
        out += bytes(ext)
    return out + pad(stored) + entry(*AFTER) + END


def old_gnu_sparse_runs(extension_blocks: bool) -> tuple[tuple[int, bytes], ...]:
    if extension_blocks:
        return tuple((k * 8192, bytes([65 + k]) * 300) for k in range(6))
    return SPARSE_RUNS


def pax_sparse(form: str) -> bytes:
    """A sparse member in pax form ``form``: ``"0.0"``, ``"0.1"``, ``"1.0"``.

    ``"2.0"``: a version no reader knows, laid out as 1.0.
    """
    stored = b"".join(d for _, d in SPARSE_RUNS)
    size = str(SPARSE_SIZE).encode()
    if form in ("1.0", "2.0"):
        nums = [str(len(SPARSE_RUNS))] + [f"{o}\n{len(d)}" for o, d in SPARSE_RUNS]
        stored = pad(("\n".join(nums) + "\n").encode()) + stored
        recs = [(b"GNU.sparse.major", form[0].encode()), (b"GNU.sparse.minor", b"0")]
        recs += [(b"GNU.sparse.name", b"sparse.bin"), (b"GNU.sparse.realsize", size)]
        name = b"GNUSparseFile.0/sparse.bin"
    elif form == "0.1":
        flat = ",".join(f"{o},{len(d)}" for o, d in SPARSE_RUNS).encode()
        recs = [(b"GNU.sparse.size", size), (b"GNU.sparse.numblocks", b"3")]
        recs += [(b"GNU.sparse.map", flat), (b"GNU.sparse.name", b"sparse.bin")]
        name = b"GNUSparseFile.1/sparse.bin"
    else:
        recs = [(b"GNU.sparse.size", size), (b"GNU.sparse.numblocks", b"3")]
        for o, d in SPARSE_RUNS:
            recs += [(b"GNU.sparse.offset", str(o).encode())]
            recs += [(b"GNU.sparse.numbytes", str(len(d)).encode())]
        name = b"sparse.bin"
    records = b"".join(pax_record(k, v) for k, v in recs)
    return pax(records) + entry(name, stored) + entry(*AFTER) + END


# -- headers ----------------------------------------------------------------------------
def gnu_incremental() -> bytes:
    """A GNU-format header whose atime and ctime fill the bytes ustar uses for a prefix."""
    times = _octal(MTIME + 5, 12) + _octal(MTIME + 9, 12)
    return entry(b"file.txt", b"hello\n", magic=GNU_MAGIC, fields={345: times}) + END


def links_and_devices() -> bytes:
    """A file, a symlink, a hard link, a character device, a FIFO and a directory."""
    return (
        entry(b"data/a.txt", b"alpha\n")
        + header(b"data/link", 0, b"2", link=b"a.txt")
        + header(b"data/hard", 0, b"1", link=b"data/a.txt")
        + header(b"dev/null", 0, b"3", fields={329: _octal(1, 8), 337: _octal(3, 8)})
        + header(b"dev/fifo", 0, b"6")
        + header(b"dir/", 0, b"5")
        + END
    )


def duplicate_names() -> bytes:
    return (
        entry(b"a.txt", b"first\n") + entry(b"b.txt", b"bee\n") + entry(b"a.txt", b"last\n") + END
    )


BAD_PAX = {
    "no newline": b"11 path=abc",
    "NUL in key": b"14 pa\x00th=abcd\n",
    "NUL in path": b"13 path=ab\x00c\n",
    "no length": b"path=abc\n",
    "bytes after the last record": pax_record(b"path", b"abc") + b"junk",
}


def bad_pax(case: str) -> bytes:
    return pax(BAD_PAX[case]) + entry(b"x.txt", b"x\n") + END


def dangling_long_name() -> bytes:
    """A GNU long-name record and then the end of the archive: no member for it."""
    return entry(b"ok.txt", b"fine\n") + entry(b"././@LongLink", b"a" * 120 + b"\x00", b"L") + END


# -- tar.zst ----------------------------------------------------------------------------
def zstd_frames(stream: bytes, frame: int) -> tuple[bytes, list[tuple[int, int]]]:
    """``stream`` cut every ``frame`` bytes into independent zstd frames, and their sizes."""
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    out, sizes = [], []
    for i in range(0, len(stream), frame):
        packed = cctx.compress(stream[i : i + frame])
        out.append(packed)
        sizes.append((len(packed), len(stream[i : i + frame])))
    return b"".join(out), sizes


def seek_table(entries: list[tuple[int, int]]) -> bytes:
    """The seekable format's table: ``(compressed, decompressed)`` per frame, no checksums."""
    body = b"".join(struct.pack("<LL", c, d) for c, d in entries)
    body += struct.pack("<LBL", len(entries), 0, 0x8F92EAB1)
    return struct.pack("<LL", 0x184D2A5E, len(body)) + body


def seekable_tar_zst(stream: bytes, frame: int = 4096, edit: str = "") -> bytes:
    """A tar stream as a seekable tar.zst as pyzstd writes it, without our member index.

    ``edit`` damages the seek table: ``"extra"`` (one entry of 0 compressed, 1,000
    decompressed bytes inserted), ``"empty"`` (a table of 0 frames).
    """
    data, sizes = zstd_frames(stream, frame)
    if edit == "extra":
        sizes.insert(len(sizes) // 2, (0, 1000))
    elif edit == "empty":
        sizes = []
    return data + seek_table(sizes)


def member_stream(count: int = 12) -> tuple[bytes, dict[str, bytes]]:
    """A tar stream of ``count`` members of 500 to 3,000 bytes, and the members."""
    members = {
        f"m/{k:02d}.bin": bytes((k * 7 + i) % 251 for i in range(500 + 250 * k))
        for k in range(count)
    }
    stream = b"".join(entry(n.encode(), d) for n, d in members.items()) + END
    return stream, members


def replace_with_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    """Write a tar of ``members`` beside ``path`` and rename it over ``path`` (a new inode)."""
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
