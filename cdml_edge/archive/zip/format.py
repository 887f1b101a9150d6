"""ZIP structures: the end records, central-directory and local-header layouts, field codecs.

Shared by the Python reader (:mod:`.read`), the C reader's Python face (:mod:`.native`), the
writer (:mod:`.write`) and format detection. Opening costs at most two source requests: one
read of the tail (:func:`~cdml_edge.archive.spec.read_tail`: the end record with the longest
comment, the ZIP64 records and often the whole central directory) and, when the central
directory is not in the tail, one read of it.
"""

from __future__ import annotations

import calendar
import struct
import time
import zlib
from dataclasses import dataclass

from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.spec import read_tail

EOCD_SIG = b"PK\x05\x06"
Z64_LOC_SIG = b"PK\x06\x07"
Z64_EOCD_SIG = b"PK\x06\x06"
CDH_SIG = b"PK\x01\x02"
LFH_SIG = b"PK\x03\x04"
DD_SIG = b"PK\x07\x08"
#: signatures a ZIP may start with (local header, empty archive, spanned-archive marker)
HEAD_SIGS = (LFH_SIG, EOCD_SIG, DD_SIG)
EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
Z64_LOC = struct.Struct("<4sLQL")  # ZIP64 end of central directory locator
Z64_EOCD = struct.Struct("<4sQ2H2L4Q")  # ZIP64 end of central directory record
CDH = struct.Struct("<4s4B4HL2L5H2L")  # central directory file header
LFH = struct.Struct("<4s2B4HL2L2H")  # local file header
U32 = 0xFFFFFFFF  # a 32-bit field that says "see the ZIP64 extra field"
# bytes read past a member's declared data, to catch a local extra field longer than the
# central one without a second request
LOCAL_SLACK = 128  # covers a data descriptor (12 bytes read) too
FLAG_ENCRYPTED = 0x1
FLAG_DESCRIPTOR = 0x8  # sizes and CRC-32 in a data descriptor after the data
FLAG_UTF8 = 0x800
EXTRA_ZIP64 = 0x0001
EXTRA_UNIX_TIME = 0x5455
EXTRA_UNICODE_PATH = 0x7075
DOS_EPOCH = 315532800  # 1980-01-01, the earliest time a DOS date holds

# One parsed central-directory entry:
# (name, offset, csize, usize, crc, method, flags, mtime, central header+name+extra length)
Entry = tuple[str, int, int, int, int, int, int, float, int]


@dataclass(frozen=True)
class CentralDirectory:
    """Where the central directory lies and the bytes of it."""

    data: bytes
    count: int
    delta: int  # bytes prepended to the archive (self-extracting stubs)


def find_eocd(tail: bytes, strict: bool = False) -> int:
    """Position of the end record in ``tail``: the last signature whose 22 bytes fit, or -1.

    The last signature is the end record, as zipfile, unzip and Go find it; no earlier
    one is ever taken in its place (:func:`read_central_directory` refuses a last record
    whose comment runs past the end). ``strict``: only when its comment ends the file.
    """
    pos = tail.rfind(EOCD_SIG, 0, max(len(tail) - 18, 0))
    if pos < 0:
        return -1
    if strict:
        clen = struct.unpack_from("<H", tail, pos + 20)[0]
        return pos if pos + 22 + clen == len(tail) else -1
    return pos


def read_central_directory(
    source: ByteSource, tail_read: tuple[int, bytes] | None = None
) -> CentralDirectory:
    """Find the end records from the tail and return the central directory bytes."""
    name = source.name
    tail_start, tail = tail_read if tail_read is not None else read_tail(source)
    pos = _end_record(tail, name)
    _, disk, cd_disk, _n_disk, count, cd_size, cd_offset, _ = EOCD.unpack_from(tail, pos)
    cd_end = tail_start + pos
    loc = pos - Z64_LOC.size
    if loc >= 0 and tail[loc : loc + 4] == Z64_LOC_SIG:
        found = _zip64_record(source, tail_start, tail, loc)
        if found is not None:
            rec, cd_end = found
            z64 = Z64_EOCD.unpack(rec)
            _check_agree((count, cd_size, cd_offset), (z64[7], z64[8], z64[9]), name)
            disk, cd_disk, count, cd_size, cd_offset = z64[4], z64[5], z64[7], z64[8], z64[9]
        elif count == 0xFFFF or U32 in (cd_size, cd_offset):
            raise CorruptArchiveError("bad ZIP64 end-of-central-directory record", archive=name)
        # else: the locator's signature is part of a name or comment (Go and zipfile agree)
    if disk != 0 or cd_disk != 0:
        raise UnsupportedArchiveError("multi-disk (spanned) ZIP archives", archive=name)
    if count * CDH.size > cd_size:
        raise CorruptArchiveError(
            f"end record declares {count} entries, a central directory of {cd_size} bytes "
            f"holds at most {cd_size // CDH.size}",
            archive=name,
        )
    delta = cd_end - cd_size - cd_offset
    if delta < 0 or cd_offset + delta < 0:
        raise TruncatedArchiveError(
            f"central directory at {cd_offset} (+{cd_size}) lies past its end record",
            archive=name,
        )
    data = _directory_bytes(source, tail_start, tail, cd_offset + delta, cd_size)
    if delta > 0 and count and data[:4] != CDH_SIG:
        # Go's rule: an end record whose sizes imply prepended bytes, where the directory
        # lies at the offset it states: the offsets count from the start of the file
        base0 = _directory_bytes(source, tail_start, tail, cd_offset, cd_end - cd_offset)
        if base0[:4] == CDH_SIG:
            data, delta = base0, 0
    return CentralDirectory(data=data, count=count, delta=delta)


def _end_record(tail: bytes, archive: str) -> int:
    """The last end record in ``tail``; refused when it is cut short or its comment is."""
    last = tail.rfind(EOCD_SIG)
    if last < 0:
        raise CorruptArchiveError("no ZIP end-of-central-directory record", archive=archive)
    if last + 22 > len(tail):
        raise TruncatedArchiveError("end-of-central-directory record cut short", archive=archive)
    clen = struct.unpack_from("<H", tail, last + 20)[0]
    if last + 22 + clen > len(tail):
        raise CorruptArchiveError(
            f"the comment of the last end-of-central-directory record runs past the end of "
            f"the file ({clen} bytes declared, {len(tail) - last - 22} present)",
            archive=archive,
        )
    return last


def _check_agree(eocd: tuple[int, int, int], z64: tuple[int, int, int], archive: str) -> None:
    """Refuse end records that disagree: zipfile takes the ZIP64 one, Go the other."""
    for what, short, full, sentinel in zip(
        ("entry count", "directory size", "directory offset"),
        eocd,
        z64,
        (0xFFFF, U32, U32),
        strict=True,
    ):
        if short != sentinel and short != full & sentinel:
            raise CorruptArchiveError(
                f"end records disagree on the {what} ({short} against ZIP64 {full})",
                archive=archive,
            )


def _directory_bytes(
    source: ByteSource, tail_start: int, tail: bytes, start: int, size: int
) -> bytes:
    if start >= tail_start:
        data = tail[start - tail_start : start - tail_start + size]
    else:
        data = source.pread(start, size)
    if len(data) != size:
        raise TruncatedArchiveError("central directory is cut short", archive=source.name)
    return data


def check_count(found: int, declared: int, archive: str) -> None:
    """Refuse a central directory that does not hold the entries the end record declares.

    Compared in the low 16 bits, as Go does: writers of more than 65,535 entries without
    ZIP64 wrap the count.
    """
    if found & 0xFFFF != declared & 0xFFFF:
        raise CorruptArchiveError(
            f"central directory holds {found} entries, the end record declares {declared}",
            archive=archive,
        )


def _zip64_record(
    source: ByteSource, tail_start: int, tail: bytes, loc: int
) -> tuple[bytes, int] | None:
    """The ZIP64 end record the locator at ``loc`` points to and where it starts, if any."""
    _, _, z64_off, _ = Z64_LOC.unpack_from(tail, loc)
    rec_abs = tail_start + loc - Z64_EOCD.size  # where the record is if nothing is prepended
    rel = rec_abs - tail_start
    if rel >= 0 and tail[rel : rel + 4] == Z64_EOCD_SIG:
        rec = tail[rel : rel + Z64_EOCD.size]
    else:
        rec_abs = z64_off
        rec = source.pread(z64_off, Z64_EOCD.size) if z64_off < source.size() else b""
    if len(rec) < Z64_EOCD.size or rec[:4] != Z64_EOCD_SIG:
        return None
    return rec, rec_abs


def dos_to_epoch(dtime: int, ddate: int) -> float:
    """Seconds since the epoch (UTC) of a DOS time and date; 0.0 when they are nonsense."""
    year = ((ddate >> 9) & 0x7F) + 1980
    month = min(max((ddate >> 5) & 0xF, 1), 12)
    day = min(max(ddate & 0x1F, 1), 31)
    hour, minute, sec = (dtime >> 11) & 0x1F, (dtime >> 5) & 0x3F, (dtime & 0x1F) * 2
    try:
        return float(calendar.timegm((year, month, day, hour, minute, sec, 0, 0, 0)))
    except (ValueError, OverflowError):
        return 0.0


def dos_time(mtime: float) -> tuple[int, int]:
    """``(time, date)`` DOS fields of ``mtime`` (UTC; times before 1980 become 1980)."""
    t = time.gmtime(max(mtime, DOS_EPOCH))
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), (
        ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday
    )


def decode_name(raw: bytes, flags: int, extra: bytes) -> str:
    """Member name: UTF-8 when flagged, the Info-ZIP Unicode Path extra, else UTF-8 or cp437."""
    if flags & FLAG_UTF8:
        return raw.decode("utf-8", "surrogateescape")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        pass
    upath = extra_field(extra, EXTRA_UNICODE_PATH)
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


def extra_field(extra: bytes, tag: int) -> bytes | None:
    """The body of the extra field ``tag`` in an extra block, or ``None``."""
    i = 0
    while i + 4 <= len(extra):
        t, n = struct.unpack_from("<HH", extra, i)
        if t == tag:
            return extra[i + 4 : i + 4 + n]
        i += 4 + n
    return None


def extra_mtime(extra: bytes) -> int | None:
    """The modification time of the extended-timestamp extra field, if there is one."""
    ut = extra_field(extra, EXTRA_UNIX_TIME)
    if ut is not None and len(ut) >= 5 and ut[0] & 1:
        return int(struct.unpack_from("<l", ut, 1)[0])
    return None
