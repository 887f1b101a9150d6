"""The zstd seekable format and the member index we store beside its seek table.

File layout written by :mod:`.write` for ``tar.zst``::

    zstd frame 0 | frame 1 | ... | skippable frame: member index | skippable frame: seek table

Frames are independent; each starts at a member boundary (large members span several
frames), so one member is read by decompressing only the frames that hold it. The seek
table is the Zstandard seekable format: one entry ``(compressed size, decompressed size)``
per frame of the file, the member index included (``(its size, 0)``, as the format asks of
skippable frames), and a 9-byte footer ``(frame count, descriptor, magic 0x8F92EAB1)``;
readers of that format (pyzstd's ``SeekableZstdFile``, ratarmount) accept the file. The
member index is a skippable frame (magic ``0x184D2A5D``) holding, per member: header and
data offsets in the tar stream, size, mtime, CRC-32 and the frame range, then the UTF-8
names; it ends with ``(content length, b"CDMLIDXE")`` so it is found from the tail. Stock
tools skip both frames: ``zstd -dc f | tar -t`` lists the archive. Archives written before
the index had its seek-table entry are read as well.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from cdml_edge.archive.errors import CorruptArchiveError, TruncatedArchiveError
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.spec import TAIL_BYTES  # one tail read serves detection and opening
from cdml_edge.archive.tar.sparse import SparseMap

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SEEK_TABLE_MAGIC = 0x184D2A5E
SEEKABLE_FOOTER_MAGIC = 0x8F92EAB1
INDEX_MAGIC = 0x184D2A5D
INDEX_HEAD = b"CDMLIDX1"
INDEX_TAIL = b"CDMLIDXE"
_RECORD = struct.Struct("<QQQdLLLL")  # header_off, data_off, size, mtime, crc, f0, f1, name_len
_RECORD_DTYPE = np.dtype(
    [
        ("h", "<u8"),
        ("d", "<u8"),
        ("s", "<u8"),
        ("m", "<f8"),
        ("c", "<u4"),
        ("f0", "<u4"),
        ("f1", "<u4"),
        ("n", "<u4"),
    ]
)
NO_CRC_FLAG = 1
CHECKSUM_FLAG = 0x80  # seek table descriptor: entries carry an XXH64 checksum
RESERVED_BITS = 0x7C  # seek table descriptor bits a reader must find at zero
MAX_TAIL_BYTES = 1 << 28  # seek table + member index: more is a forged length


def is_skippable(head: bytes) -> bool:
    """Whether ``head`` starts with a zstd skippable frame's magic (``0x184D2A5?``)."""
    return len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18"


@dataclass(frozen=True)
class FrameTable:
    """Compressed and decompressed start offsets of each frame (one extra at the end)."""

    coff: list[int]
    doff: list[int]

    @property
    def count(self) -> int:
        """Number of frames."""
        return len(self.coff) - 1

    def frames_for(self, start: int, end: int) -> tuple[int, int]:
        """First and last frame holding tar-stream bytes ``[start, end)``."""
        f0 = bisect.bisect_right(self.doff, start) - 1
        f1 = bisect.bisect_left(self.doff, max(end, start + 1)) - 1
        return max(f0, 0), min(max(f1, f0), self.count - 1)


@dataclass(frozen=True)
class IndexRecord:
    """One member as the member index stores it (``crc``: ``None`` when none was stored)."""

    name: str
    header_offset: int
    data_offset: int
    size: int
    mtime: float
    crc: int | None


def seek_table_frame(sizes: list[tuple[int, int]]) -> bytes:
    """The seek table as a skippable frame; ``sizes``: (compressed, decompressed) per frame."""
    body = b"".join(struct.pack("<LL", c, d) for c, d in sizes)
    body += struct.pack("<LBL", len(sizes), 0, SEEKABLE_FOOTER_MAGIC)
    return struct.pack("<LL", SEEK_TABLE_MAGIC, len(body)) + body


def index_frame(
    records: list[tuple[str, int, int, int, float, int, int, int]], flags: int = 0
) -> bytes:
    """``records``: (name, header_off, data_off, size, mtime, crc, first frame, last frame).

    ``flags``: :data:`NO_CRC_FLAG` when the records carry no CRC-32.
    """
    names = [r[0].encode("utf-8", "surrogateescape") for r in records]
    body = [INDEX_HEAD, struct.pack("<LL", flags, len(records))]
    for r, raw in zip(records, names, strict=False):
        body.append(_RECORD.pack(r[1], r[2], r[3], float(r[4]), r[5], r[6], r[7], len(raw)))
    body.append(b"".join(n + b"\x00" for n in names))  # NUL-terminated names
    content = b"".join(body)
    content += struct.pack("<Q", len(content) + 16) + INDEX_TAIL
    return struct.pack("<LL", INDEX_MAGIC, len(content)) + content


@dataclass(frozen=True)
class MemberIndex:
    """The member index as columns (cheap to build for many members)."""

    names: list[str]
    header_offsets: list[int]
    data_offsets: list[int]
    sizes: list[int]
    mtimes: list[float]
    crcs: list[int | None]
    #: row -> why reading it is refused (a sparse file of an unknown format), row -> the map
    #: of a sparse file; our writer's index has neither
    refused: dict[int, str] = field(default_factory=dict)
    sparse: dict[int, SparseMap] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        for k in range(len(self.names)):
            yield IndexRecord(
                self.names[k],
                self.header_offsets[k],
                self.data_offsets[k],
                self.sizes[k],
                self.mtimes[k],
                self.crcs[k],
            )


@dataclass(frozen=True)
class SeekableTail:
    """What the tail of a seekable tar.zst holds: its frames and member index."""

    frames: FrameTable  # the frames of the tar stream (the index frame left out)
    index: MemberIndex | None
    data_end: int  # where the frames end in the file (by the seek table)
    stream_end: int = 0  # where the tar stream's frames must end: the index, or the table


def has_footer(tail: bytes) -> bool:
    """Whether ``tail`` ends with the seekable format's footer magic."""
    return len(tail) >= 17 and struct.unpack_from("<L", tail, len(tail) - 4)[0] == (
        SEEKABLE_FOOTER_MAGIC
    )


class _Tail:
    """The bytes read from the end of the source, extended backwards on demand."""

    def __init__(self, source: ByteSource, tail_read: tuple[int, bytes] | None) -> None:
        self.source = source
        self.size = source.size()
        if tail_read is None:
            start = max(0, self.size - TAIL_BYTES)
            tail_read = (start, source.pread(start, self.size - start))
        self.start, self.data = tail_read

    def reach(self, offset: int, what: str) -> None:
        """Make sure the bytes from ``offset`` on are held (one more request if not)."""
        if offset >= self.start:
            return
        if offset < 0 or self.size - offset > MAX_TAIL_BYTES:
            raise CorruptArchiveError(
                f"{what} declares {self.size - offset} bytes from the end of the file",
                archive=self.source.name,
            )
        self.data = self.source.pread(offset, self.start - offset) + self.data
        self.start = offset

    def at(self, offset: int, length: int, what: str = "seek table") -> bytes:
        self.reach(offset, what)
        rel = offset - self.start
        return self.data[rel : rel + length]


def read_seekable_tail(
    source: ByteSource, tail_read: tuple[int, bytes] | None = None
) -> SeekableTail | None:
    """Seek table and member index from the tail (≤2 requests), or ``None`` if absent.

    The member index is the last frame before the seek table. Archives written since the
    index has its own seek-table entry ``(index frame size, 0)``, as the seekable format asks
    of every frame; earlier ones left it out. Both are read: the frames of the tar stream
    are the entries before the index either way.
    """
    if source.size() < 17:
        return None
    tail = _Tail(source, tail_read)
    table = _seek_table(tail)
    if table is None:
        return None
    entries, st_start = table
    istart = _index_start(tail, st_start)
    index = None
    data_end = st_start
    if istart is not None:
        index = _parse_index(tail.at(istart, st_start - istart, "member index"), source.name)
        if entries and entries[-1][1] == 0 and sum(e[0] for e in entries) == st_start:
            if entries[-1][0] != st_start - istart:
                raise CorruptArchiveError(
                    "seek table entry of the member index has the wrong size", archive=source.name
                )
            entries = entries[:-1]
        data_end = istart
    coff = list(accumulate((e[0] for e in entries), initial=0))
    doff = list(accumulate((e[1] for e in entries), initial=0))
    if index is not None:  # without it the frames are found by a pass over the stream
        _check_table(entries, coff[-1], data_end, source.name)
    return SeekableTail(FrameTable(coff, doff), index, coff[-1], data_end)


def _check_table(entries: list[tuple[int, ...]], total: int, end: int, archive: str) -> None:
    """Refuse a seek table that does not describe the frames before the member index.

    Its compressed sizes must add up to where the index starts, and no entry may be
    empty (the smallest zstd frame takes 9 bytes): an entry too many or too few shifts
    every member after it. Frame headers that carry a size are checked as each frame is
    decoded, and every member against its CRC-32.
    """
    if total > end:
        raise TruncatedArchiveError(
            f"seek table declares {total} compressed bytes, file has {end}", archive=archive
        )
    if total != end:
        raise CorruptArchiveError(
            f"seek table accounts for {total} compressed bytes, the frames take {end}",
            archive=archive,
        )
    for k, entry in enumerate(entries):
        if entry[0] == 0:
            raise CorruptArchiveError(
                f"seek table entry {k} describes a frame of 0 compressed bytes", archive=archive
            )


def _seek_table(tail: _Tail) -> tuple[list[tuple[int, ...]], int] | None:
    """The seek table's entries ``(compressed, decompressed[, checksum])`` and its offset.

    When the table does not fit in the tail, one request fetches it together with the frame
    its last entry describes (our index has the entry ``(size, 0)``), so opening stays at two.
    """
    name = tail.source.name
    count, desc, magic = struct.unpack_from("<LBL", tail.data, len(tail.data) - 9)
    if magic != SEEKABLE_FOOTER_MAGIC or desc & RESERVED_BITS:
        return None  # no seek table, or a later version of it: read as a plain stream
    esize = 12 if desc & CHECKSUM_FLAG else 8
    content = count * esize + 9
    st_start = tail.size - 8 - content
    if st_start < 0:
        raise CorruptArchiveError("seek table larger than the file", archive=name)
    if count and st_start < tail.start:
        last_c, last_d = struct.unpack_from("<LL", tail.data, len(tail.data) - 9 - esize)
        with_index = last_d == 0 and last_c <= st_start
        tail.reach(st_start - last_c if with_index else st_start, "seek table")
    m, flen = struct.unpack_from("<LL", tail.at(st_start, 8))
    if m != SEEK_TABLE_MAGIC or flen != content:
        raise CorruptArchiveError("bad seek table frame header", archive=name)
    raw = tail.at(st_start + 8, count * esize)
    return list(struct.iter_unpack("<LL" if esize == 8 else "<LLL", raw)), st_start


def _index_start(tail: _Tail, st_start: int) -> int | None:
    """Where our member index frame starts, when it ends right before the seek table."""
    end = tail.at(st_start - 16, 16, "member index") if st_start >= 24 else b""
    if len(end) < 16 or end[8:] != INDEX_TAIL:
        return None
    (ilen,) = struct.unpack_from("<Q", end)
    istart = st_start - 8 - ilen
    if istart < 0 or ilen < 32:
        raise CorruptArchiveError("bad member index length", archive=tail.source.name)
    return istart


def parse_index_frame(frame: bytes, archive: str) -> MemberIndex:
    """The member index of an :func:`index_frame`; ``CorruptArchiveError`` when malformed."""
    return _parse_index(frame, archive)


def _parse_index(frame: bytes, archive: str) -> MemberIndex:
    m, flen = struct.unpack_from("<LL", frame, 0)
    if m != INDEX_MAGIC or flen + 8 != len(frame) or frame[8:16] != INDEX_HEAD:
        raise CorruptArchiveError("bad member index frame", archive=archive)
    flags, count = struct.unpack_from("<LL", frame, 16)
    p = 24
    end = len(frame) - 16
    if p + count * _RECORD.size > end:
        raise CorruptArchiveError("member index count too large", archive=archive)
    rec = np.frombuffer(frame, dtype=_RECORD_DTYPE, count=count, offset=p)
    cols = [rec[f].tolist() for f in _RECORD_DTYPE.names or ()]
    p += count * _RECORD.size
    names = frame[p:end].decode("utf-8", "surrogateescape").split("\x00")
    if len(names) != count + 1 or names[-1] != "":
        raise CorruptArchiveError(
            f"member index holds {len(names) - 1} names for {count} members", archive=archive
        )
    names.pop()
    crcs: list[int | None] = [None] * count if flags & NO_CRC_FLAG else list(cols[4])
    return MemberIndex(names, list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]), crcs)
