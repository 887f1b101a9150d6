"""``open_archive``: one entry point for every source and format."""

from __future__ import annotations

import os
from typing import Any

from cdml_edge.archive.base import DEFAULT_MAX_MEMBER_BYTES, DEFAULT_MAX_RATIO, Archive
from cdml_edge.archive.errors import ArchiveError, UnsupportedArchiveError
from cdml_edge.archive.source import ByteSource, FileObjectSource, FileSource, MemorySource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar import seekable
from cdml_edge.archive.tar.read import TarArchive, ZstdTarArchive
from cdml_edge.archive.zip.archive import ZipArchive
from cdml_edge.archive.zip.format import find_eocd, read_tail

SourceLike = Any  # str | os.PathLike | bytes | bytearray | memoryview | BinaryIO | ByteSource


def as_source(source: SourceLike) -> ByteSource:
    """Wrap what the caller gave into a :class:`ByteSource`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return MemorySource(source)
    if isinstance(source, str) and source.startswith("s3://"):
        from cdml_edge.archive.s3.source import open_s3_source  # type: ignore[import-not-found]

        return open_s3_source(source)  # type: ignore[no-any-return]
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source)
    if isinstance(source, ByteSource) and not hasattr(source, "read"):
        return source
    if hasattr(source, "read") and hasattr(source, "seek"):
        return FileObjectSource(source)
    raise TypeError(f"cannot open an archive from {type(source).__name__}")


def detect(source: ByteSource, tail_read: tuple[int, bytes] | None = None) -> str:
    """``"zip"``, ``"tar.zst"`` or ``"tar"`` from the bytes (the name is not looked at).

    The tail alone decides for ZIP and seekable tar.zst, so opening them costs no extra
    request; otherwise the first block is read.
    """
    tail_start, tail = tail_read if tail_read is not None else read_tail(source)
    if find_eocd(tail, strict=True) >= 0:
        return "zip"
    if seekable.has_footer(tail):
        return "tar.zst"
    head = tail[:512] if tail_start == 0 else source.pread(0, 512)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return "zip"
    if head[:4] == seekable.ZSTD_MAGIC or seekable.is_skippable(head):
        return "tar.zst"
    if tarfmt.header_ok(head):
        return "tar"
    if find_eocd(tail) >= 0:  # an end record followed by trailing bytes
        return "zip"
    raise UnsupportedArchiveError("not a ZIP, tar.zst or tar archive", archive=source.name)


def open_archive(
    source: SourceLike,
    *,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> Archive:
    """Open an archive from a path, ``s3://`` URL, bytes, a binary file or a ByteSource.

    The format is detected from the bytes. Members larger than ``max_member_bytes`` or
    expanding more than ``max_ratio`` times (above 1 MiB) are refused when read.
    """
    src = as_source(source)
    limits: dict[str, Any] = {"max_member_bytes": max_member_bytes, "max_ratio": max_ratio}
    try:
        tail = read_tail(src)
        fmt = detect(src, tail)
        if fmt == "zip":
            return ZipArchive.open(src, tail=tail, **limits)
        if fmt == "tar.zst":
            return ZstdTarArchive.open(src, tail=tail, **limits)
        return TarArchive(src, **limits)
    except ArchiveError:
        raise
    except (ValueError, IndexError, OverflowError, MemoryError) as exc:  # struct errors etc.
        raise ArchiveError(f"cannot parse archive: {exc}", archive=src.name) from exc

