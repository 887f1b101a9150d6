"""The member index of a plain tar copy, kept beside it so that reopening it walks nothing.

A plain copy (:mod:`.reframe`) is the tar stream itself: reopening it would walk every
member header again (about 15-25 µs a member in Python: seconds for a million members at
every start of a training run). Its member index, found while the copy was written, is kept
in ``<copy>.idx``: the copy's size and a CRC-32 of the index, then the index as the frame a
seekable tar.zst carries (:func:`~.seekable.index_frame`, no member CRCs). An index that does
not match its copy (size, CRC, offsets past the end) is not used: the copy is walked as
before. Copies with entries the frame cannot say (links and other skipped entries, sparse
files, refused members) keep no index.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import NO_CRC_FLAG, index_frame, parse_index_frame
from cdml_edge.fsio import atomic_write

SUFFIX = ".idx"
_HEAD = struct.Struct("<QL")  # the copy's size, CRC-32 of the frame


def index_path(copy: str | os.PathLike[str]) -> str:
    """Where the index of the plain copy ``copy`` is kept."""
    return os.fspath(copy) + SUFFIX


def save_index(copy: str | os.PathLike[str], rows: TarRows) -> bool:
    """Keep ``rows`` beside ``copy``; ``False`` when they cannot be kept (see the module)."""
    index = rows.index
    if rows.skipped or index.sparse or index.refused:
        return False
    records = [
        (n, h, d, s, m, 0, 0, 0)
        for n, h, d, s, m in zip(
            index.names, index.header_offsets, index.data_offsets, index.sizes, index.mtimes,
            strict=True,
        )
    ]  # fmt: skip
    frame = index_frame(records, flags=NO_CRC_FLAG)
    try:
        size = os.stat(copy).st_size
        # no fsync: a torn index fails its CRC and the copy is walked instead
        atomic_write(index_path(copy), _HEAD.pack(size, zlib.crc32(frame)) + frame, fsync=False)
    except OSError:
        return False
    return True


def load_index(copy: str | os.PathLike[str], copy_size: int) -> TarRows | None:
    """The member index kept beside ``copy`` (of ``copy_size`` bytes); ``None``: walk it."""
    path = index_path(copy)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rows = _parsed(data, copy_size, os.fspath(copy))
    if rows is None:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return rows


def _parsed(data: bytes, copy_size: int, name: str) -> TarRows | None:
    if len(data) < _HEAD.size:
        return None
    size, crc = _HEAD.unpack_from(data)
    frame = data[_HEAD.size :]
    if size != copy_size or zlib.crc32(frame) != crc:
        return None
    try:
        index = parse_index_frame(frame, name)
    except ArchiveError:
        return None
    if any(d + s > copy_size for d, s in zip(index.data_offsets, index.sizes, strict=True)):
        return None
    return TarRows.build(index)
