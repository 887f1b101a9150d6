"""``open_archive``: one entry point for every source and format."""

from __future__ import annotations

import os
from typing import Any

from cdml_edge.archive.base import (
    DEFAULT_MAX_MEMBER_BYTES,
    DEFAULT_MAX_MEMBERS,
    DEFAULT_MAX_RATIO,
    Archive,
)
from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.formats import detect
from cdml_edge.archive.seekable_cache import CacheSetting, SeekableCache
from cdml_edge.archive.source import ByteSource, FileObjectSource, FileSource, MemorySource
from cdml_edge.archive.spec import Probe

SourceLike = Any  # str | os.PathLike | bytes | bytearray | memoryview | BinaryIO | ByteSource


def as_source(source: SourceLike) -> ByteSource:
    """Wrap what the caller gave into a :class:`ByteSource`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return MemorySource(source)
    if isinstance(source, str) and source.startswith("s3://"):
        from cdml_edge.archive.s3 import open_s3_source

        return open_s3_source(source)
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source)
    if isinstance(source, ByteSource) and not hasattr(source, "read"):
        return source
    if hasattr(source, "read") and hasattr(source, "seek"):
        return FileObjectSource(source)
    raise TypeError(f"cannot open an archive from {type(source).__name__}")


def open_archive(
    source: SourceLike,
    *,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
    max_members: int = DEFAULT_MAX_MEMBERS,
    seekable_cache: CacheSetting = None,
) -> Archive:
    """Open an archive from a path, ``s3://`` URL, bytes, a binary file or a ByteSource.

    The format is detected from the bytes (the tail alone decides for ZIP and seekable
    tar.zst, so opening them costs no extra request). Members larger than
    ``max_member_bytes`` or expanding more than ``max_ratio`` times (above 1 MiB) are
    refused when read. An archive of more than ``max_members`` entries (files, links,
    devices) is refused at open (:class:`~.errors.TooManyMembersError`): its index would cost about
    450 bytes an entry, and a tar.zst holds a million empty entries in 43 KB. With a
    ``seekable_cache``, a tar.zst of one zstd frame (as stock
    ``tar --zstd`` writes) is read from a seekable copy made once in that folder: a
    :class:`SeekableCache`, a folder, or ``True`` for the configured one, as a dataset's
    setting (:meth:`SeekableCache.from_setting`); ``None`` / ``False``: none.
    """
    cache = SeekableCache.from_setting(seekable_cache)
    src = as_source(source)
    try:
        probe = Probe(src)
        fmt = detect(probe)
        limits = {
            "max_member_bytes": max_member_bytes,
            "max_ratio": max_ratio,
            "max_members": max_members,
        }
        if cache is not None and fmt.name == "tar.zst":
            archive = cache.open(src, probe.tail_read, **limits)
            if getattr(archive, "seekable_copy", None) is not None:  # read from its copy
                _release(src, source)
                return archive
        else:
            archive = fmt.archive.open(src, tail=probe.tail_read, **limits)
        _index_read(src)
        return archive
    except ArchiveError:
        _release(src, source)
        raise
    except (ValueError, IndexError, OverflowError, MemoryError) as exc:  # struct errors etc.
        _release(src, source)
        raise ArchiveError(f"cannot parse archive: {exc}", archive=src.name) from exc


def _release(src: ByteSource, given: SourceLike) -> None:
    """Close a source opened here for an archive that was refused.

    A long-running process that meets many bad files must not keep a descriptor for each.
    """
    if src is not given:
        src.close()


def _index_read(src: object) -> None:
    """Tell ``src`` its index is read (an ``s3://`` source's hook; others have none).

    An ``s3://`` source keeps the bytes read while the index is read, and writes them to
    its index cache, for as long as reads extend them backwards from the tail: members
    read from the last one back would otherwise all be taken for index reads.
    """
    loaded = getattr(src, "index_loaded", None)
    if callable(loaded):
        loaded()
