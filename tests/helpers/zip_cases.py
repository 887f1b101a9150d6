"""ZIP bytes built by hand, one generator per class where readers have disagreed.

End records (a comment running past the end, ZIP64 records that disagree or claim 2^64-1
entries, ZIP64 signatures inside a name), data descriptors, base-0 offsets, a member of
2^32-1 bytes without a ZIP64 extra field. Built here, never copied.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

EOCD = struct.Struct("<4s4H2LH")
Z64_EOCD = struct.Struct("<4sQ2H2L4Q")
Z64_LOC = struct.Struct("<4sLQL")


def stdlib_zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _end(data: bytes) -> tuple[int, tuple[int, ...]]:
    pos = data.rindex(b"PK\x05\x06")
    return pos, EOCD.unpack_from(data, pos)


def truncated_comment() -> bytes:
    """A ZIP (``zero.txt``), then another (``one.txt``) with a comment that is not there.

    The last end record, ``one.txt``'s, declares a 50-byte comment past the end of the file.
    """
    first = stdlib_zip({"zero.txt": b"zero\n"})
    second = stdlib_zip({"one.txt": b"one\n"})
    return first + second[:-2] + struct.pack("<H", 50)


def cut_end_signature() -> bytes:
    """A ZIP with junk after it that ends in an end-record signature cut short."""
    return stdlib_zip({"a.txt": b"a\n"}) + b"junk" + b"PK\x05\x06\x00\x00"


def with_zip64_end(data: bytes, *, count: int | None = None, offset_shift: int = 0) -> bytes:
    """``data`` with ZIP64 end records added (its end record made of sentinels).

    ``count`` replaces the ZIP64 entry count; ``offset_shift`` moves the ZIP64 directory
    offset while the end record keeps the real one (the two then disagree).
    """
    pos, (_, _, _, _, n, size, off, _) = _end(data)
    z64_at = pos
    z64 = Z64_EOCD.pack(
        b"PK\x06\x06", 44, 45, 45, 0, 0, n, n if count is None else count, size, off + offset_shift
    )
    loc = Z64_LOC.pack(b"PK\x06\x07", 0, z64_at, 1)
    if offset_shift:
        end = EOCD.pack(b"PK\x05\x06", 0, 0, n, n, size, off, 0)
    else:
        end = EOCD.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:pos] + z64 + loc + end


def count_mismatch() -> bytes:
    """A ZIP of two members whose end record declares one."""
    data = stdlib_zip({"a.txt": b"a\n", "b.txt": b"b\n"})
    pos, (sig, d, cd, _, _, size, off, c) = _end(data)
    return data[:pos] + EOCD.pack(sig, d, cd, 1, 1, size, off, c)


def entry_zip(
    entries: list[tuple[bytes, bytes, int]],
    *,
    descriptor: bytes | None = None,
    cd_size_delta: int = 0,
    extra: bytes = b"",
    usize: int | None = None,
    local_names: dict[bytes, bytes] | None = None,
) -> bytes:
    """Stored members ``(name, data, flags)``.

    ``descriptor``: what follows the data of a member with flag 8 (``None``: a right one);
    ``local_names``: central name -> the name its local header gives instead.
    """
    out = bytearray()
    central = bytearray()
    for name, data, flags in entries:
        crc = zlib.crc32(data)
        size = len(data) if usize is None else usize
        local_crc, local_size = (0, 0) if flags & 8 else (crc, len(data))
        off = len(out)
        local = (local_names or {}).get(name, name)
        out += struct.pack(
            "<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, flags, 0, 0, 0x5021,
            local_crc, local_size, local_size if usize is None else size, len(local), 0,
        )  # fmt: skip
        out += local + data
        if flags & 8:
            right = struct.pack("<4sLLL", b"PK\x07\x08", crc, len(data), len(data))
            out += right if descriptor is None else descriptor
        central += struct.pack(
            "<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 0, 20, 0, flags, 0, 0, 0x5021,
            crc, len(data), size, len(name), len(extra), 0, 0, 0, 0, off,
        )  # fmt: skip
        central += name + extra
    cd_off = len(out)
    out += central
    n = len(entries)
    out += EOCD.pack(b"PK\x05\x06", 0, 0, n, n, len(central) + cd_size_delta, cd_off, 0)
    return bytes(out)


def descriptor_crc_altered(signature: bool = True) -> bytes:
    data = b"streamed member\n"
    bad = (zlib.crc32(data) ^ 1).to_bytes(4, "little") + struct.pack("<LL", len(data), len(data))
    return entry_zip(
        [(b"ok.txt", b"fine\n", 0), (b"dd.txt", data, 8)],
        descriptor=(b"PK\x07\x08" if signature else b"") + bad,
    )


def descriptor_right(signature: bool) -> bytes:
    data = b"streamed member\n"
    right = zlib.crc32(data).to_bytes(4, "little") + struct.pack("<LL", len(data), len(data))
    return entry_zip(
        [(b"dd.txt", data, 8), (b"after.txt", b"after\n", 0)],
        descriptor=(b"PK\x07\x08" if signature else b"") + right,
    )


def zip64_locator_in_name() -> bytes:
    """The 20 bytes before the end record (the last name's end) start with a locator magic."""
    return entry_zip([(b"a.txt", b"a\n", 0), (b"name" + b"PK\x06\x07" + b"-" * 16, b"b\n", 0)])


def zip64_locator_in_extra() -> bytes:
    """The same in an unknown extra field, with the locator's disk fields zero."""
    body = b"PK\x06\x07" + struct.pack("<LQL", 0, 0, 1)
    extra = struct.pack("<HH", 0xCAFE, len(body)) + body
    return entry_zip([(b"a.txt", b"a\n", 0), (b"b.txt", b"b\n", 0)], extra=extra)


def base0_offsets() -> bytes:
    """An end record that understates its directory by 10 bytes: read from base 0 (Go)."""
    return entry_zip([(b"a.txt", b"alpha\n", 0), (b"b.txt", b"beta\n", 0)], cd_size_delta=-10)


def max_size_without_zip64() -> bytes:
    """A member declaring 2^32-1 bytes, with no ZIP64 extra (as 42.zip's innermost)."""
    return entry_zip([(b"big.bin", b"x", 0)], usize=0xFFFFFFFF)


def local_name_differs(same_length: bool = True) -> bytes:
    """``b.txt``'s local header names it ``x.exe`` (or a longer name).

    A reader of local headers and a reader of the central directory list two archives.
    """
    other = b"x.exe" if same_length else b"payload/x.exe"
    return entry_zip(
        [(b"a.txt", b"alpha\n", 0), (b"b.txt", b"beta\n", 0)], local_names={b"b.txt": other}
    )
