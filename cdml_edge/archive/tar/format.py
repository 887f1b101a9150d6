"""Tar headers: parsing (ustar, GNU long names, pax) and building (pax where needed)."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

from cdml_edge.archive.errors import CorruptArchiveError, TruncatedArchiveError

BLOCK = 512
REGULAR = {b"0", b"\x00", b"7"}


@dataclass(frozen=True, slots=True)
class TarMember:
    """One regular file in a tar stream (offsets are in the uncompressed stream)."""

    name: str
    header_offset: int
    data_offset: int
    size: int
    mtime: float


def _number(field: bytes, what: str, archive: str) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        if field[0] & 0x40:
            value -= 1 << (8 * (len(field) - 1) + 6)
        return value
    text = field.split(b"\x00", 1)[0].strip(b" \x00")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise CorruptArchiveError(
            f"tar header: bad {what} field {field!r}", archive=archive
        ) from None


def header_ok(block: bytes) -> bool:
    """True when ``block`` is a tar header with a valid checksum."""
    if len(block) < BLOCK or block.count(0) == BLOCK:
        return False
    try:
        stored = _number(block[148:156], "checksum", "")
    except CorruptArchiveError:
        return False
    unsigned = sum(block[:148]) + 256 + sum(block[156:512])
    signed = sum((b - 256 if b > 127 else b) for b in block[:148] + block[156:512]) + 256
    return stored in (unsigned, signed)


def _pax(data: bytes, archive: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise CorruptArchiveError("tar: bad pax record", archive=archive) from None
        if length <= 0 or pos + length > len(data):
            raise CorruptArchiveError("tar: bad pax record length", archive=archive)
        rec = data[sp + 1 : pos + length - 1]
        key, _, value = rec.partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def padded(size: int) -> int:
    """``size`` rounded up to whole 512-byte tar blocks."""
    return (size + BLOCK - 1) // BLOCK * BLOCK


# Meta-records (long names, pax) are small; cap them so a forged size cannot exhaust memory.
MAX_META = 1 << 20
META_KINDS = (b"L", b"x", b"g", b"K")  # GNU long name / link, pax per-file / global


def scan(
    read: Callable[[int], bytes],
    skip: Callable[[int], None],
    archive: str,
    on_member: Callable[[TarMember], None],
) -> int:
    """Walk a tar stream, calling ``on_member`` for every regular file; returns its length.

    ``read(n)`` returns the next ``n`` bytes (short at the end), ``skip(n)`` passes over
    ``n`` bytes. A missing end-of-archive marker is accepted when the stream ends cleanly
    on a header boundary.
    """
    pos = 0
    meta = _Meta()
    while True:
        block = read(BLOCK)
        if not _is_header(block, pos, archive):
            return pos
        header_offset = pos
        pos += BLOCK
        kind = block[156:157]
        size = _number(block[124:136], "size", archive)
        if size < 0:
            raise CorruptArchiveError(
                f"tar header at {header_offset}: negative size", archive=archive
            )
        if kind in META_KINDS:
            pos += _read_meta(read, kind, size, header_offset, archive, meta)
            continue
        size = meta.size(size, archive)
        if kind in REGULAR:
            name, mtime = meta.name(block), meta.mtime(block, archive)
            on_member(TarMember(name, header_offset, pos, size, mtime))
        if size:
            skip(padded(size))
            pos += padded(size)
        meta = _Meta()


def _is_header(block: bytes, pos: int, archive: str) -> bool:
    """False at the end of the archive (no more bytes, or a zero block); raises on a bad one."""
    if len(block) == 0:
        return False
    if len(block) < BLOCK:
        raise TruncatedArchiveError(f"tar header at {pos} cut short", archive=archive)
    if block.count(0) == BLOCK:
        return False
    if not header_ok(block):
        raise CorruptArchiveError(f"tar header at {pos}: bad checksum", archive=archive)
    return True


@dataclass
class _Meta:
    """What meta-records said about the next member: a GNU long name, pax keys."""

    longname: str | None = None
    pax: dict[str, str] = field(default_factory=dict)

    def size(self, size: int, archive: str) -> int:
        if "size" not in self.pax:
            return size
        try:
            return int(self.pax["size"])
        except ValueError:
            raise CorruptArchiveError("tar: bad pax size", archive=archive) from None

    def name(self, block: bytes) -> str:
        if "path" in self.pax:
            return self.pax["path"]
        if self.longname is not None:
            return self.longname
        raw = block[0:100].split(b"\x00", 1)[0]
        if block[257:262] == b"ustar":
            prefix = block[345:500].split(b"\x00", 1)[0]
            if prefix:
                raw = prefix + b"/" + raw
        return raw.decode("utf-8", "surrogateescape")

    def mtime(self, block: bytes, archive: str) -> float:
        try:
            if "mtime" in self.pax:
                return float(self.pax["mtime"])
            return float(_number(block[136:148], "mtime", archive))
        except ValueError:
            return 0.0


def _read_meta(
    read: Callable[[int], bytes], kind: bytes, size: int, at: int, archive: str, meta: _Meta
) -> int:
    """Read the meta-record of the header at ``at`` into ``meta``; the bytes it took."""
    if size > MAX_META:
        raise CorruptArchiveError(f"tar header at {at}: {size}-byte meta record", archive=archive)
    data = read(padded(size))
    if len(data) < padded(size):
        raise TruncatedArchiveError(f"tar record at {at} cut short", archive=archive)
    if kind == b"L":
        meta.longname = data[:size].split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
    elif kind == b"x":
        meta.pax.update(_pax(data[:size], archive))
    return padded(size)


def build_header(name: str, size: int, mtime: float) -> bytes:
    """A tar header (with a pax record when the name or size needs one) for a regular file."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


END_OF_ARCHIVE = b"\x00" * (2 * BLOCK)
