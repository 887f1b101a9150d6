"""ZIP reading: our own end-of-central-directory and central-directory parser.

Opening costs at most two source requests: one read of the tail (which finds the end
record, the ZIP64 locator and often the whole central directory) and, when the
central directory is not in the tail, one read of the central directory.
"""

from __future__ import annotations

import calendar
import struct
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdml_edge.archive import codecs
from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsafeMemberError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.names import has_dir_names
from cdml_edge.archive.source import ByteSource

# one read of the tail holds the end record with the longest comment, the ZIP64 records
# and, for most archives, the whole central directory
TAIL_BYTES = 1 << 17
EOCD_SIG = b"PK\x05\x06"
Z64_LOC_SIG = b"PK\x06\x07"
Z64_EOCD_SIG = b"PK\x06\x06"
CDH_SIG = b"PK\x01\x02"
LFH_SIG = b"PK\x03\x04"
_EOCD = struct.Struct("<4s4H2LH")
_Z64_LOC = struct.Struct("<4sLQL")
_Z64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CDH = struct.Struct("<4s4B4HL2L5H2L")
_LFH = struct.Struct("<4s2B4HL2L2H")
# bytes read past a member's declared data, to catch a local extra field longer than the
# central one without a second request
LOCAL_SLACK = 128
FLAG_ENCRYPTED = 0x1
FLAG_UTF8 = 0x800


@dataclass(frozen=True)
class CentralDirectory:
    """Where the central directory lies and the bytes of it."""

    data: bytes
    count: int
    delta: int  # bytes prepended to the archive (self-extracting stubs)


def _find_eocd(tail: bytes, strict: bool = False) -> int:
    """Position of the end record in ``tail``; the one whose comment ends the file wins.

    Unless ``strict``, an end record followed by trailing bytes is accepted too."""
    best = -1
    pos = tail.rfind(EOCD_SIG)
    while pos >= 0:
        if pos + 22 <= len(tail):
            clen = struct.unpack_from("<H", tail, pos + 20)[0]
            if pos + 22 + clen == len(tail):
                return pos
            if best < 0 and pos + 22 + clen <= len(tail):
                best = pos
        pos = tail.rfind(EOCD_SIG, 0, pos)
    return -1 if strict else best


def read_tail(source: ByteSource) -> tuple[int, bytes]:
    """``(offset, bytes)`` of the last :data:`TAIL_BYTES` of the source (one request)."""
    size = source.size()
    start = max(0, size - TAIL_BYTES)
    return start, source.pread(start, size - start)


def read_central_directory(
    source: ByteSource, tail_read: tuple[int, bytes] | None = None
) -> CentralDirectory:
    """Find the end records from the tail and return the central directory bytes."""
    name = source.name
    tail_start, tail = tail_read if tail_read is not None else read_tail(source)
    pos = _find_eocd(tail)
    if pos < 0:
        raise CorruptArchiveError("no ZIP end-of-central-directory record", archive=name)
    _, disk, cd_disk, _n_disk, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, pos)
    eocd_abs = tail_start + pos
    cd_end = eocd_abs
    loc = pos - _Z64_LOC.size
    if loc >= 0 and tail[loc : loc + 4] == Z64_LOC_SIG:
        _, _, z64_off, _ = _Z64_LOC.unpack_from(tail, loc)
        rec_abs = tail_start + loc - _Z64_EOCD.size  # where the record is if nothing is prepended
        rel = rec_abs - tail_start
        if rel >= 0 and tail[rel : rel + 4] == Z64_EOCD_SIG:
            rec = tail[rel : rel + _Z64_EOCD.size]
        else:
            rec_abs = z64_off
            rec = source.pread(z64_off, _Z64_EOCD.size)
        if len(rec) < _Z64_EOCD.size or rec[:4] != Z64_EOCD_SIG:
            raise CorruptArchiveError("bad ZIP64 end-of-central-directory record", archive=name)
        (_, _, _, _, disk, cd_disk, _n_disk, count, cd_size, cd_offset) = _Z64_EOCD.unpack(rec)
        cd_end = rec_abs
    if disk != 0 or cd_disk != 0:
        raise UnsupportedArchiveError("multi-disk (spanned) ZIP archives", archive=name)
    delta = cd_end - cd_size - cd_offset
    if delta < 0 or cd_offset + delta < 0:
        raise TruncatedArchiveError(
            f"central directory at {cd_offset} (+{cd_size}) lies past its end record",
            archive=name,
        )
    start = cd_offset + delta
    if start >= tail_start:
        data = tail[start - tail_start : start - tail_start + cd_size]
    else:
        data = source.pread(start, cd_size)
    if len(data) != cd_size:
        raise TruncatedArchiveError("central directory is cut short", archive=name)
    return CentralDirectory(data=data, count=count, delta=delta)


def _dos_to_epoch(dtime: int, ddate: int) -> float:
    year = ((ddate >> 9) & 0x7F) + 1980
    month = min(max((ddate >> 5) & 0xF, 1), 12)
    day = min(max(ddate & 0x1F, 1), 31)
    hour, minute, sec = (dtime >> 11) & 0x1F, (dtime >> 5) & 0x3F, (dtime & 0x1F) * 2
    try:
        return float(calendar.timegm((year, month, day, hour, minute, sec, 0, 0, 0)))
    except (ValueError, OverflowError):
        return 0.0


def decode_name(raw: bytes, flags: int, extra: bytes) -> str:
    """Member name: UTF-8 when flagged, the Info-ZIP Unicode Path extra, else UTF-8 or cp437."""
    if flags & FLAG_UTF8:
        return raw.decode("utf-8", "surrogateescape")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        pass
    upath = _extra_field(extra, 0x7075)
    if (
        upath is not None
        and len(upath) >= 5
        and upath[0] == 1
        and struct.unpack_from("<L", upath, 1)[0] == zlib.crc32(raw)
    ):
        try:
            return upath[5:].decode("utf-8")
        except UnicodeDecodeError:
            pass
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp437")


def _extra_field(extra: bytes, tag: int) -> bytes | None:
    i = 0
    while i + 4 <= len(extra):
        t, n = struct.unpack_from("<HH", extra, i)
        if t == tag:
            return extra[i + 4 : i + 4 + n]
        i += 4 + n
    return None


def _extra_mtime(extra: bytes) -> int | None:
    ut = _extra_field(extra, 0x5455)
    if ut is not None and len(ut) >= 5 and ut[0] & 1:
        return int(struct.unpack_from("<l", ut, 1)[0])
    return None


# One parsed central-directory entry:
# (name, offset, csize, usize, crc, method, flags, mtime, central header+name+extra length)
Entry = tuple[str, int, int, int, int, int, int, float, int]


def parse_central_directory(cd: CentralDirectory, archive: str) -> list[Entry]:
    """The pure-Python central-directory parser."""
    data = cd.data
    out: list[Entry] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < _CDH.size:
            raise TruncatedArchiveError(
                f"central directory entry {len(out)} cut short", archive=archive
            )
        f = _CDH.unpack_from(data, pos)
        if f[0] != CDH_SIG:
            raise CorruptArchiveError(
                f"bad central directory signature at entry {len(out)}", archive=archive
            )
        flags, method, dtime, ddate, crc, csize, usize, nlen, elen, clen = f[5:15]
        offset = f[18]
        p = pos + _CDH.size
        if p + nlen + elen + clen > end:
            raise TruncatedArchiveError(
                f"central directory entry {len(out)} cut short", archive=archive
            )
        raw = data[p : p + nlen]
        extra = data[p + nlen : p + nlen + elen]
        if 0xFFFFFFFF in (usize, csize, offset):
            z64 = _extra_field(extra, 0x0001) or b""
            j = 0
            try:
                if usize == 0xFFFFFFFF:
                    usize = struct.unpack_from("<Q", z64, j)[0]
                    j += 8
                if csize == 0xFFFFFFFF:
                    csize = struct.unpack_from("<Q", z64, j)[0]
                    j += 8
                if offset == 0xFFFFFFFF:
                    offset = struct.unpack_from("<Q", z64, j)[0]
            except struct.error:
                raise CorruptArchiveError(
                    f"entry {len(out)}: ZIP64 extra field is missing or short", archive=archive
                ) from None
        name = decode_name(raw, flags, extra)
        ut = _extra_mtime(extra)
        mtime = float(ut) if ut is not None else _dos_to_epoch(dtime, ddate)
        out.append((name, offset + cd.delta, csize, usize, crc, method, flags, mtime, nlen + elen))
        pos = p + nlen + elen + clen
    return out


def read_length(e: Entry, size: int) -> int:
    """Bytes to read from a member's local header: header, declared data and some slack."""
    return max(0, min(size - e[1], 30 + e[8] + e[2] + LOCAL_SLACK))


def member_data(
    buf: bytes, offset: int, csize: int, source: ByteSource, archive: str, member: str
) -> memoryview:
    """The compressed data of one member, given the bytes read from its local header on."""
    if len(buf) < 30:
        raise TruncatedArchiveError("local header cut short", archive=archive, member=member)
    if buf[:4] != LFH_SIG:
        raise CorruptArchiveError("bad local header signature", archive=archive, member=member)
    nlen, elen = struct.unpack_from("<2H", buf, 26)
    start = 30 + nlen + elen
    if start + csize > len(buf):
        more = source.pread(offset + len(buf), start + csize - len(buf))
        buf = buf + more
        if start + csize > len(buf):
            raise TruncatedArchiveError("member data cut short", archive=archive, member=member)
    return memoryview(buf)[start : start + csize]


class ZipArchive(Archive):
    """A ZIP archive (ZIP64, data descriptors, stored / deflate / zstd / bzip2 members)."""

    format = "zip"

    def __init__(
        self,
        source: ByteSource,
        *,
        native: Any = None,
        tail: tuple[int, bytes] | None = None,
        **limits: Any,
    ) -> None:
        super().__init__(source, **limits)
        cd = read_central_directory(source, tail)
        self._native_index: Any = None
        if native is not None:
            self._native_index = native.ZipIndex(cd, source.name)
            names = self._native_index.names
            self._entries: list[Entry] = []
        else:
            self._entries = parse_central_directory(cd, source.name)
            names = [e[0] for e in self._entries]
        self._row_names = names
        if native is not None:
            ents = self._native_index._ents
            spans = [(ents[i].offset, ents[i].csize) for i in range(len(names))]
        else:
            spans = [(e[1], e[2]) for e in self._entries]
        check_overlap(spans, names, source.name)
        ids = dict(zip(names, range(len(names)), strict=True))
        dirs = self._native_index.ndirs if native is not None else None
        if len(ids) == len(names) and (dirs == 0 or (dirs is None and not has_dir_names(names))):
            self._names, self._ids = names, ids  # the common case: no directories, no repeats
        else:
            # a later entry of the same name wins (as with unzip); the first position is kept
            self._names = [n for i, n in enumerate(names) if not n.endswith("/") and ids[n] == i]
            first: dict[str, int] = {}
            for i, n in enumerate(names):
                first.setdefault(n, i)
            order = sorted(self._names, key=first.__getitem__)
            self._dups = [n for n, c in Counter(names).items() if c > 1 and not n.endswith("/")]
            self._names = order
            self._ids = {n: ids[n] for n in order}

    @property
    def native(self) -> bool:
        return self._native_index is not None

    @property
    def engine(self) -> str:  # type: ignore[override]
        return "native" if self._native_index is not None else "python"

    def _row(self, i: int) -> Entry:
        if self._native_index is not None:
            return self._native_index.entry(i, self._row_names[i])  # type: ignore[no-any-return]
        return self._entries[i]

    def _row_name(self, i: int) -> str:
        return self._row_names[i]

    def _info(self, i: int) -> MemberInfo:
        e = self._row(i)
        return MemberInfo(
            name=e[0],
            size=e[3],
            compressed_size=e[2],
            method=codecs.method_name(e[5]),
            checksum=e[4],
            mtime=e[7],
            offset=e[1],
        )

    def _declared_size(self, i: int) -> int:
        return self._row(i)[3]

    def _check(self, i: int, e: Entry) -> None:
        if e[6] & FLAG_ENCRYPTED:
            raise UnsupportedArchiveError("encrypted member", archive=self.name, member=e[0])
        if e[5] not in codecs.METHOD_NAMES or e[5] == codecs.LZMA:
            raise UnsupportedArchiveError(
                f"compression {codecs.method_name(e[5])} is not supported",
                archive=self.name,
                member=e[0],
            )
        if e[5] == codecs.STORED and e[2] != e[3]:
            raise CorruptArchiveError(
                f"stored member declares {e[3]} bytes but {e[2]} compressed",
                archive=self.name,
                member=e[0],
            )
        self._check_limits(e[0], e[3], e[2])

    def read(self, name: str) -> bytes:
        index = self._native_index
        if index is None or self._closed:
            return super().read(name)
        i = self._ids.get(name)
        if i is None:
            i = self._id(name)  # raises KeyError naming the archive
        return index.read_one(self._source, i, self._row_names, self)  # type: ignore[no-any-return]

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        if self._native_index is not None:
            return self._native_index.read(  # type: ignore[no-any-return]
                self._source, ids, self._row_names, self
            )
        entries = self._entries
        for i in ids:
            self._check(i, entries[i])
        return read_python(self._source, [entries[i] for i in ids], self.name)


def check_overlap(spans: Sequence[tuple[int, int]], names: Sequence[str], archive: str) -> None:
    """Refuse members whose bytes (local header on) overlap another member's.

    Each span is ``(local header offset, compressed size)``; a member covers at least
    ``30 + csize`` bytes from its offset. Members sharing bytes are how a small ZIP
    declares far more output than its size (the overlapping-member bomb)."""
    order = sorted(range(len(spans)), key=lambda k: spans[k][0])
    end = -1
    prev = -1
    for k in order:
        off, csize = spans[k]
        if off < end:
            raise UnsafeMemberError(
                f"member data overlaps member {names[prev]!r} (offset {off})",
                archive=archive,
                member=names[k],
            )
        end, prev = off + 30 + csize, k


def read_python(source: ByteSource, entries: Sequence[Entry], archive: str) -> list[bytes]:
    """Read and check members with the pure-Python path (one ``pread_many``)."""
    size = source.size()
    order = sorted(range(len(entries)), key=lambda k: entries[k][1])
    ranges = [(entries[k][1], read_length(entries[k], size)) for k in order]
    bufs = source.pread_many(ranges) if len(ranges) > 1 else [source.pread(*ranges[0])]
    out: list[bytes] = [b""] * len(entries)
    for k, buf in zip(order, bufs, strict=False):
        e = entries[k]
        data = member_data(buf, e[1], e[2], source, archive, e[0])
        blob = codecs.decompress(e[5], data, e[3], archive=archive, member=e[0])
        codecs.check_crc(blob, e[4], archive=archive, member=e[0])
        out[k] = blob
    return out
