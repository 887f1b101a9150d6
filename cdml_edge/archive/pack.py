"""Writing archives: :func:`pack` (in memory) and :func:`write_archive` (a file, atomically).

What every format shares lives here: member names checked, the optional ``manifest.json``
built, the format chosen from a name or a path. The bytes come from each format's writer
(:mod:`.zip.write`, :mod:`.tar.write`).
"""

from __future__ import annotations

import io
import json
import os
import time
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from cdml_edge.archive import formats
from cdml_edge.archive.errors import ArchiveError, UnsafeMemberError
from cdml_edge.archive.names import is_safe_member_name
from cdml_edge.archive.spec import WriteOptions
from cdml_edge.archive.tar.write import FRAME_BYTES
from cdml_edge.fsio import atomic_writer

MANIFEST_NAME = "manifest.json"


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
    write = formats.writer(format)
    write(out, prepared, WriteOptions(level=level, mtime=when, frame_bytes=frame_bytes))


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
    """The format :func:`write_archive` writes for a file name (``.zip``, ``.tar.zst``, ...).

    :class:`UnsupportedArchiveError` for other names.
    """
    return formats.for_path(path).name


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
    """Write an archive atomically and return its size.

    Atomically: temporary file in the same folder, fsync, mode 0644, rename, fsync of the
    folder. ``format`` defaults to the path's suffix; other arguments as for :func:`pack`.
    """
    fmt = format or format_for_path(path)
    with atomic_writer(path) as f:
        _write(f, items, fmt, level, manifest, mtime, frame_bytes)
        size = f.tell()
    return size
