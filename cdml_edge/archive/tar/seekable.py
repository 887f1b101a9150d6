"""The zstd seekable format and the member index we store beside its seek table.

File layout written by :mod:`.write` for ``tar.zst``::

    zstd frame 0 | frame 1 | ... | skippable frame: member index | skippable frame: seek table

Frames are independent; each starts at a member boundary (large members span several
frames), so one member is read by decompressing only the frames that hold it. The seek
table follows the zstd seekable format: entries ``(compressed size, decompressed size)``
and a 9-byte footer ``(frame count, descriptor, magic 0x8F92EAB1)``. The member index is
a skippable frame (magic ``0x184D2A5D``) holding, per member: header and data offsets in
the tar stream, size, mtime, CRC-32 and the frame range, then the UTF-8 names; it ends
with ``(content length, b"CDMLIDXE")`` so it is found from the tail. Stock tools skip
both frames: ``zstd -dc f | tar -t`` lists the archive.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from cdml_edge.archive.errors import CorruptArchiveError, TruncatedArchiveError
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.spec import TAIL_BYTES  # one tail read serves detection and opening

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


def is_skippable(head: bytes) -> bool:
    return len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18"


@dataclass(frozen=True)
class FrameTable:
    """Compressed and decompressed start offsets of each frame (one extra at the end)."""

    coff: list[int]
    doff: list[int]

    @property
    def count(self) -> int:
        return len(self.coff) - 1

    def frames_for(self, start: int, end: int) -> tuple[int, int]:
        """First and last frame holding tar-stream bytes ``[start, end)``."""
        f0 = bisect.bisect_right(self.doff, start) - 1
        f1 = bisect.bisect_left(self.doff, max(end, start + 1)) - 1
        return max(f0, 0), min(max(f1, f0), self.count - 1)


@dataclass(frozen=True)
class IndexRecord:
    name: str
    header_offset: int
    data_offset: int
    size: int
    mtime: float
    crc: int | None


def seek_table_frame(sizes: list[tuple[int, int]]) -> bytes:
    body = b"".join(struct.pack("<LL", c, d) for c, d in sizes)
    body += struct.pack("<LBL", len(sizes), 0, SEEKABLE_FOOTER_MAGIC)
    return struct.pack("<LL", SEEK_TABLE_MAGIC, len(body)) + body


def index_frame(records: list[tuple[str, int, int, int, float, int, int, int]]) -> bytes:
    """``records``: (name, header_off, data_off, size, mtime, crc, first frame, last frame)."""
    names = [r[0].encode("utf-8", "surrogateescape") for r in records]
    body = [INDEX_HEAD, struct.pack("<LL", 0, len(records))]
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

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):  # type: ignore[no-untyped-def]
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
    frames: FrameTable
    index: MemberIndex | None
    data_end: int  # where the frames end in the file


def has_footer(tail: bytes) -> bool:
    return len(tail) >= 17 and struct.unpack_from("<L", tail, len(tail) - 4)[0] == (
        SEEKABLE_FOOTER_MAGIC
    )


def read_tail(
    source: ByteSource, tail_read: tuple[int, bytes] | None = None
) -> SeekableTail | None:
    """Seek table and member index from the tail (≤2 requests), or ``None`` if absent."""
    name = source.name
    size = source.size()
    if size < 17:
        return None
    if tail_read is None:
        tail_start = max(0, size - TAIL_BYTES)
        tail = source.pread(tail_start, size - tail_start)
    else:
        tail_start, tail = tail_read
    count, desc, magic = struct.unpack_from("<LBL", tail, len(tail) - 9)
    if magic != SEEKABLE_FOOTER_MAGIC:
        return None
    esize = 12 if desc & 0x80 else 8
    content = count * esize + 9
    st_start = size - 8 - content
    if st_start < 0:
        raise CorruptArchiveError("seek table larger than the file", archive=name)
    need_from = st_start
    extra = b""
    if st_start < tail_start:
        extra = source.pread(st_start, tail_start - st_start)
        tail = extra + tail
        tail_start = st_start
    rel = st_start - tail_start
    m, flen = struct.unpack_from("<LL", tail, rel)
    if m != SEEK_TABLE_MAGIC or flen != content:
        raise CorruptArchiveError("bad seek table frame header", archive=name)
    entries = list(
        struct.iter_unpack("<LL" if esize == 8 else "<LLL", tail[rel + 8 : rel + 8 + count * esize])
    )
    coff = list(accumulate((e[0] for e in entries), initial=0))
    doff = list(accumulate((e[1] for e in entries), initial=0))
    index = None
    if rel >= 24 and tail[rel - 8 : rel] == INDEX_TAIL:
        (ilen,) = struct.unpack_from("<Q", tail, rel - 16)
        istart = st_start - 8 - ilen
        if istart < 0 or ilen < 32:
            raise CorruptArchiveError("bad member index length", archive=name)
        if istart < tail_start:
            if extra:  # a second far read would be a third request: refuse forged lengths
                raise CorruptArchiveError("member index overlaps the seek table", archive=name)
            tail = source.pread(istart, tail_start - istart) + tail
            tail_start = istart
        irel = istart - tail_start
        index = _parse_index(tail[irel : irel + 8 + ilen], name)
        need_from = istart
    if coff[-1] > need_from:
        raise TruncatedArchiveError(
            f"seek table declares {coff[-1]} compressed bytes, file has {need_from}", archive=name
        )
    return SeekableTail(FrameTable(coff, doff), index, coff[-1])


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
