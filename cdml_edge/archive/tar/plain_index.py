"""The member index of a plain tar copy, kept beside it so that reopening it walks nothing.

A plain copy (:mod:`.reframe`) is the tar stream itself: reopening it would walk every
member header again (about 15-25 µs a member in Python: seconds for a million members at
every start of a training run). Its member index, found while the copy was written, is kept
in ``<copy>.idx``: the copy's size, a CRC-32 of the index and a CRC-32 of sampled header
blocks of the copy (its first block, the block before the data of up to :data:`SAMPLES`
members, spread over the index), then the index as the frame a seekable tar.zst carries
(:func:`~.seekable.index_frame`, no member CRCs). An index that does not match its copy
(size, CRC, offsets past the end, sampled headers: another copy of the same size left under
its name) is not used: the copy is walked as before. Only a regular file is read as an
index (a FIFO or device named so would block the open or never end). Copies with entries
the frame cannot say (links and other skipped entries, sparse files, refused members) keep
no index, and drop one kept of an earlier copy under their name.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import zlib

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import NO_CRC_FLAG, index_frame, parse_index_frame
from cdml_edge.fsio import atomic_write

SUFFIX = ".idx"
_SLACK = 64 << 10  # the index's own head and frame, over its copy's size
_HEAD = struct.Struct("<QLL")  # the copy's size, CRC-32 of the frame, CRC-32 of sampled headers
SAMPLES = 64
_BLOCK = 512


def index_path(copy: str | os.PathLike[str]) -> str:
    """Where the index of the plain copy ``copy`` is kept."""
    return os.fspath(copy) + SUFFIX


def save_index(copy: str | os.PathLike[str], rows: TarRows) -> bool:
    """Keep ``rows`` beside ``copy``; ``False`` when they cannot be kept (see the module)."""
    index = rows.index
    if rows.skipped or index.sparse or index.refused:
        _drop(copy)  # an index kept of an earlier copy under this name is not this one's
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
        sampled = _sampled(copy, index.data_offsets)
        head = _HEAD.pack(size, zlib.crc32(frame), sampled)
        # no fsync: a torn index fails its CRC and the copy is walked instead
        atomic_write(index_path(copy), head + frame, fsync=False)
    except OSError:
        _drop(copy)
        return False
    return True


def _drop(copy: str | os.PathLike[str]) -> None:
    with contextlib.suppress(OSError):
        os.unlink(index_path(copy))


def _sampled(copy: str | os.PathLike[str], data_offsets: list[int]) -> int:
    """CRC-32 of the copy's first block and the blocks before up to :data:`SAMPLES` members.

    The block before a member's data is its header; the first block says whether a copy an
    index of no member is checked against has members.
    """
    n = len(data_offsets)
    picks = sorted({i * (n - 1) // (SAMPLES - 1) for i in range(SAMPLES)}) if n else []
    fd = os.open(copy, os.O_RDONLY)
    try:
        crc = zlib.crc32(os.pread(fd, _BLOCK, 0))
        for i in picks:
            at = data_offsets[i] - _BLOCK
            crc = zlib.crc32(os.pread(fd, _BLOCK, at) if at >= 0 else b"", crc)
    finally:
        os.close(fd)
    return crc


def load_index(copy: str | os.PathLike[str], copy_size: int) -> TarRows | None:
    """The member index kept beside ``copy`` (of ``copy_size`` bytes); ``None``: walk it."""
    path = index_path(copy)
    try:  # not blocking on a FIFO; only a regular file is read
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        # a regular file, and no larger than its copy: a member takes 512 bytes of the copy
        # at least, its record about 40 and its name, which the copy holds too
        if not stat.S_ISREG(st.st_mode) or st.st_size > copy_size + _SLACK:
            return None
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read()
        rows = _parsed(data, copy_size, os.fspath(copy))
    except OSError:
        rows = None
    finally:
        os.close(fd)
    if rows is None:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return rows


def _parsed(data: bytes, copy_size: int, name: str) -> TarRows | None:
    if len(data) < _HEAD.size:
        return None
    size, crc, sampled = _HEAD.unpack_from(data)
    frame = data[_HEAD.size :]
    if size != copy_size or zlib.crc32(frame) != crc:
        return None
    try:
        index = parse_index_frame(frame, name)
    except ArchiveError:
        return None
    if any(d + s > copy_size for d, s in zip(index.data_offsets, index.sizes, strict=True)):
        return None
    if _sampled(name, index.data_offsets) != sampled:
        return None
    return TarRows.build(index)
