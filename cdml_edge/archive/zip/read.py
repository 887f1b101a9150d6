"""ZIP reading, the pure-Python path: central-directory parser and member reads.

The C core (:mod:`.native`) does the same work faster and falls back to
:func:`read_python` for what it does not handle.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsafeMemberError,
)
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.zip import codecs
from cdml_edge.archive.zip.format import (
    CDH,
    CDH_SIG,
    DD_SIG,
    EXTRA_ZIP64,
    FLAG_DESCRIPTOR,
    LFH_SIG,
    LOCAL_SLACK,
    U32,
    CentralDirectory,
    Entry,
    decode_name,
    dos_to_epoch,
    extra_field,
    extra_mtime,
)


def parse_central_directory(
    cd: CentralDirectory, archive: str, raw_names: list[bytes] | None = None
) -> list[Entry]:
    """The pure-Python central-directory parser; ``raw_names`` gets each name's bytes."""
    data = cd.data
    out: list[Entry] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < CDH.size:
            raise TruncatedArchiveError(
                f"central directory entry {len(out)} cut short", archive=archive
            )
        f = CDH.unpack_from(data, pos)
        if f[0] != CDH_SIG:
            raise CorruptArchiveError(
                f"bad central directory signature at entry {len(out)}", archive=archive
            )
        flags, method, dtime, ddate, crc, csize, usize, nlen, elen, clen = f[5:15]
        offset = f[18]
        p = pos + CDH.size
        if p + nlen + elen + clen > end:
            raise TruncatedArchiveError(
                f"central directory entry {len(out)} cut short", archive=archive
            )
        raw = data[p : p + nlen]
        if raw_names is not None:
            raw_names.append(raw)
        extra = data[p + nlen : p + nlen + elen]
        z64 = extra_field(extra, EXTRA_ZIP64) if U32 in (usize, csize, offset) else None
        if z64 is None and U32 in (csize, offset):
            z64 = b""  # a 32-bit field that needs its ZIP64 value: refused below
        if z64 is not None:  # (2^32-1 bytes and no ZIP64 extra: that size, as Go and zipfile)
            j = 0
            try:
                if usize == U32:
                    usize = struct.unpack_from("<Q", z64, j)[0]
                    j += 8
                if csize == U32:
                    csize = struct.unpack_from("<Q", z64, j)[0]
                    j += 8
                if offset == U32:
                    offset = struct.unpack_from("<Q", z64, j)[0]
            except struct.error:
                raise CorruptArchiveError(
                    f"entry {len(out)}: ZIP64 extra field is missing or short", archive=archive
                ) from None
        name = decode_name(raw, flags, extra)
        ut = extra_mtime(extra)
        mtime = float(ut) if ut is not None else dos_to_epoch(dtime, ddate)
        out.append((name, offset + cd.delta, csize, usize, crc, method, flags, mtime, nlen + elen))
        pos = p + nlen + elen + clen
    return out


def read_length(e: Entry, size: int) -> int:
    """Bytes to read from a member's local header: header, declared data and some slack."""
    return max(0, min(size - e[1], 30 + e[8] + e[2] + LOCAL_SLACK))


def member_data(
    buf: bytes,
    offset: int,
    csize: int,
    source: ByteSource,
    archive: str,
    member: str,
    crc: int | None = None,
    name: bytes | None = None,
) -> memoryview:
    """The compressed data of one member, given the bytes read from its local header on.

    ``crc``: the central directory's CRC-32 of a member with a data descriptor, which
    must carry the same one (:func:`check_descriptor`); ``name``: the central directory's
    name bytes, which the local header must carry too.
    """
    if len(buf) < 30:
        raise TruncatedArchiveError("local header cut short", archive=archive, member=member)
    if buf[:4] != LFH_SIG:
        raise CorruptArchiveError("bad local header signature", archive=archive, member=member)
    nlen, elen = struct.unpack_from("<2H", buf, 26)
    start = 30 + nlen + elen
    need = start + csize + (DESCRIPTOR_BYTES if crc is not None else 0)
    if need > len(buf):
        more = source.pread(offset + len(buf), need - len(buf))
        buf = buf + more
        if need > len(buf):
            raise TruncatedArchiveError("member data cut short", archive=archive, member=member)
    if name is not None and buf[30 : 30 + nlen] != name:
        raise CorruptArchiveError(NAME_MISMATCH, archive=archive, member=member)
    if crc is not None:
        check_descriptor(buf, start + csize, crc, archive, member)
    return memoryview(buf)[start : start + csize]


#: the reason given for a local header that names its member otherwise (zipfile refuses
#: it too; a reader of local headers would list another archive)
NAME_MISMATCH = "the local header's name is not the central directory's"


#: bytes of a data descriptor read after a member's data (Go reads as many)
DESCRIPTOR_BYTES = 12


def check_descriptor(buf: bytes, at: int, crc: int, archive: str, member: str) -> None:
    """Refuse a data descriptor (at ``at`` in ``buf``) whose CRC-32 is not ``crc``.

    zipfile ignores the descriptor, Go refuses the member: a check that can fail is kept.
    The optional signature (``DD_SIG``) before the CRC-32 is skipped.
    """
    skip = 4 if buf[at : at + 4] == DD_SIG else 0
    (got,) = struct.unpack_from("<L", buf, at + skip)
    if got != crc:
        raise CorruptArchiveError(descriptor_message(got, crc), archive=archive, member=member)


def descriptor_message(got: int, crc: int) -> str:
    """The reason given for a data descriptor that disagrees with the central directory."""
    return f"data descriptor CRC-32 {got:08x} is not the central directory's {crc:08x}"


def check_overlap(spans: Sequence[tuple[int, int]], names: Sequence[str], archive: str) -> None:
    """Refuse members whose bytes (local header on) overlap another member's.

    Each span is ``(local header offset, compressed size)``; a member covers at least
    ``30 + csize`` bytes from its offset. Members sharing bytes are how a small ZIP
    declares far more output than its size (the overlapping-member bomb).
    """
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


def read_python(
    source: ByteSource,
    entries: Sequence[Entry],
    archive: str,
    raw_names: Sequence[bytes | None] | None = None,
) -> list[bytes]:
    """Read and check members with the pure-Python path (one ``pread_many``).

    ``raw_names``: each member's central-directory name bytes, checked against its local
    header (``None``: not checked).
    """
    size = source.size()
    order = sorted(range(len(entries)), key=lambda k: entries[k][1])
    ranges = [(entries[k][1], read_length(entries[k], size)) for k in order]
    bufs = source.pread_many(ranges) if len(ranges) > 1 else [source.pread(*ranges[0])]
    out: list[bytes] = [b""] * len(entries)
    for k, buf in zip(order, bufs, strict=False):
        e = entries[k]
        dd = e[4] if e[6] & FLAG_DESCRIPTOR else None
        raw = raw_names[k] if raw_names is not None else None
        data = member_data(buf, e[1], e[2], source, archive, e[0], dd, raw)
        blob = codecs.decompress(e[5], data, e[3], archive=archive, member=e[0])
        codecs.check_crc(blob, e[4], archive=archive, member=e[0])
        out[k] = blob
    return out
