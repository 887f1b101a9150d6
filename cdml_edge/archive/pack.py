"""Writing archives: ZIP (stored / deflate, ZIP64 when needed) and seekable tar.zst."""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import tempfile
import time
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

import zstandard

from cdml_edge.archive.errors import ArchiveError, UnsafeMemberError, UnsupportedArchiveError
from cdml_edge.archive.names import is_safe_member_name
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar import seekable

MANIFEST_NAME = "manifest.json"
# Types that are already compressed: a ZIP stores them instead of deflating again.
COMPRESSED_SUFFIXES = frozenset(
    [
        ".jpg",
        ".jpeg",
        ".png",
        ".gif",
        ".webp",
        ".avif",
        ".heic",
        ".jxl",
        ".mp3",
        ".m4a",
        ".aac",
        ".ogg",
        ".opus",
        ".flac",
        ".mp4",
        ".m4v",
        ".mkv",
        ".webm",
        ".mov",
        ".avi",
        ".zip",
        ".gz",
        ".tgz",
        ".bz2",
        ".xz",
        ".zst",
        ".7z",
        ".rar",
        ".lz4",
        ".br",
        ".npz",
        ".onnx",
        ".pt",
    ]
)
FRAME_BYTES = 32 << 10  # target uncompressed size of a tar.zst frame
MAX_FRAME_BYTES = 1 << 20  # large members are cut into frames of this size
_U32 = 0xFFFFFFFF


def _canonical(manifest: Mapping[str, Any], items: list[tuple[str, bytes]]) -> bytes:
    doc = dict(manifest)
    if "items" not in doc:
        doc["items"] = [
            {"name": n, "size": len(d), "crc32": f"{zlib.crc32(d):08x}"} for n, d in items
        ]
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _prepare(
    items: Iterable[tuple[str, bytes]], manifest: Mapping[str, Any] | None
) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for name, data in items:
        if not isinstance(name, str) or not is_safe_member_name(name) or name.endswith("/"):
            raise UnsafeMemberError("refusing to write an unsafe member name", member=str(name))
        if name in seen or (manifest is not None and name == MANIFEST_NAME):
            raise ArchiveError("duplicate member name", member=name)
        seen.add(name)
        out.append((name, bytes(data)))
    if manifest is not None:
        out.append((MANIFEST_NAME, _canonical(manifest, out)))
    return out


def _dos_time(mtime: float) -> tuple[int, int]:
    t = time.gmtime(max(mtime, 315532800))  # the DOS epoch is 1980
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), (
        ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday
    )


def _write_zip(out: BinaryIO, items: list[tuple[str, bytes]], level: int, mtime: float) -> None:
    central: list[bytes] = []
    offset = 0
    dtime, ddate = _dos_time(mtime)
    ut = struct.pack("<HHBl", 0x5455, 5, 1, int(mtime))
    for name, data in items:
        raw = name.encode("utf-8", "surrogateescape")
        flags = 0 if raw.isascii() else 0x800
        crc = zlib.crc32(data)
        method, body = 0, data
        if os.path.splitext(name)[1].lower() not in COMPRESSED_SUFFIXES and data:
            c = zlib.compressobj(min(max(level, 1), 9), zlib.DEFLATED, -15)
            packed = c.compress(data) + c.flush()
            if len(packed) < len(data):
                method, body = 8, packed
        big = len(data) >= _U32 or len(body) >= _U32
        local_extra = ut + (struct.pack("<HHQQ", 1, 16, len(data), len(body)) if big else b"")
        version = 45 if big else 20
        out.write(
            struct.pack(
                "<4s2B4HL2L2H",
                b"PK\x03\x04",
                version,
                0,
                flags,
                method,
                dtime,
                ddate,
                crc,
                _U32 if big else len(body),
                _U32 if big else len(data),
                len(raw),
                len(local_extra),
            )
        )
        out.write(raw)
        out.write(local_extra)
        out.write(body)
        z64 = b""
        if big:
            z64 += struct.pack("<QQ", len(data), len(body))
        if offset >= _U32:
            z64 += struct.pack("<Q", offset)
        cextra = ut + (struct.pack("<HH", 1, len(z64)) + z64 if z64 else b"")
        central.append(
            struct.pack(
                "<4s4B4HL2L5H2L",
                b"PK\x01\x02",
                version,
                3,
                version,
                0,
                flags,
                method,
                dtime,
                ddate,
                crc,
                _U32 if big else len(body),
                _U32 if big else len(data),
                len(raw),
                len(cextra),
                0,
                0,
                0,
                0o100644 << 16,
                _U32 if offset >= _U32 else offset,
            )
            + raw
            + cextra
        )
        offset += 30 + len(raw) + len(local_extra) + len(body)
    cd = b"".join(central)
    out.write(cd)
    n, cd_off, cd_size = len(items), offset, len(cd)
    if n >= 0xFFFF or cd_off >= _U32 or cd_size >= _U32:
        z64_at = cd_off + cd_size
        out.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, cd_size, cd_off))
        out.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, z64_at, 1))
        out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, _U32, _U32, 0))
    else:
        out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, cd_size, cd_off, 0))


class _FrameWriter:
    """Collects tar-stream bytes and emits independent zstd frames."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self._out = out
        self._cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._buf: list[bytes] = []
        self._buffered = 0
        self.sizes: list[tuple[int, int]] = []
        self.position = 0  # bytes of tar stream written or buffered

    def add(self, data: bytes) -> None:
        self._buf.append(data)
        self._buffered += len(data)
        self.position += len(data)

    @property
    def buffered(self) -> int:
        return self._buffered

    @property
    def frame(self) -> int:
        """Index of the frame the next byte goes to."""
        return len(self.sizes)

    def flush(self) -> None:
        if not self._buffered:
            return
        block = b"".join(self._buf)
        packed = self._cctx.compress(block)
        self._out.write(packed)
        self.sizes.append((len(packed), len(block)))
        self._buf, self._buffered = [], 0


def _write_tar_zst(
    out: BinaryIO, items: list[tuple[str, bytes]], level: int, mtime: float, frame_bytes: int
) -> None:
    w = _FrameWriter(out, level)
    records: list[tuple[str, int, int, int, float, int, int, int]] = []
    for name, data in items:
        if w.buffered >= frame_bytes:
            w.flush()
        header_off = w.position
        w.add(tarfmt.build_header(name, len(data), mtime))
        data_off = w.position
        first = w.frame
        view = memoryview(data)
        for start in range(0, len(data), MAX_FRAME_BYTES):
            if w.buffered >= MAX_FRAME_BYTES:
                w.flush()
            w.add(bytes(view[start : start + MAX_FRAME_BYTES]))
        last = w.frame
        w.add(b"\x00" * (tarfmt.padded(len(data)) - len(data)))
        records.append(
            (name, header_off, data_off, len(data), mtime, zlib.crc32(data), first, last)
        )
    w.add(tarfmt.END_OF_ARCHIVE)
    w.flush()
    out.write(seekable.index_frame(records))
    out.write(seekable.seek_table_frame(w.sizes))


def _write(
    out: BinaryIO,
    items: Iterable[tuple[str, bytes]],
    format: str,
    level: int,
    manifest: Mapping[str, Any] | None,
    mtime: float | None,
    frame_bytes: int,
) -> None:
    prepared = _prepare(items, manifest)
    when = time.time() if mtime is None else float(mtime)
    if format == "zip":
        _write_zip(out, prepared, level, when)
    elif format in ("tar.zst", "tzst"):
        _write_tar_zst(out, prepared, level, when, frame_bytes)
    else:
        raise UnsupportedArchiveError(f"cannot write format {format!r} (zip or tar.zst)")


def pack(
    items: Iterable[tuple[str, bytes]],
    format: str = "zip",
    level: int = 3,
    manifest: Mapping[str, Any] | None = None,
    *,
    mtime: float | None = None,
    frame_bytes: int = FRAME_BYTES,
) -> bytes:
    """Build an archive in memory from ``(name, bytes)`` pairs.

    ``format``: ``"zip"`` (deflate at ``level`` clamped to 1..9; already-compressed types
    are stored) or ``"tar.zst"`` (zstd seekable format at ``level``, frames of about
    ``frame_bytes``). A ``manifest`` mapping becomes the last member ``manifest.json``
    (canonical JSON; an ``items`` list of name/size/CRC-32 is added unless present).
    ``mtime`` (default: now) is recorded for every member.
    """
    buf = io.BytesIO()
    _write(buf, items, format, level, manifest, mtime, frame_bytes)
    return buf.getvalue()


def format_for_path(path: str | os.PathLike[str]) -> str:
    p = os.fspath(path).lower()
    if p.endswith(".zip"):
        return "zip"
    if p.endswith((".tar.zst", ".tzst", ".tar.zstd")):
        return "tar.zst"
    raise UnsupportedArchiveError(f"cannot tell the format from the name {os.fspath(path)!r}")


def write_archive(
    path: str | os.PathLike[str],
    items: Iterable[tuple[str, bytes]],
    format: str | None = None,
    level: int = 3,
    manifest: Mapping[str, Any] | None = None,
    *,
    mtime: float | None = None,
    frame_bytes: int = FRAME_BYTES,
) -> int:
    """Write an archive atomically (temporary file in the same folder, fsync, rename,
    fsync of the folder) and return its size. ``format`` defaults to the path's suffix."""
    target = os.fspath(path)
    fmt = format or format_for_path(target)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            _write(f, items, fmt, level, manifest, mtime, frame_bytes)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return size
