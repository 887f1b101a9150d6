"""Tar headers: parsing (ustar, GNU long names, pax) and building (pax where needed)."""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdml_edge.archive.errors import CorruptArchiveError, TruncatedArchiveError
from cdml_edge.archive.tar import sparse
from cdml_edge.archive.tar.pax import parse_pax

if TYPE_CHECKING:
    from cdml_edge.archive.source import ByteSource

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
    refused: str = ""  # why reading it is refused (a sparse file); "" when it reads
    sparse: sparse.SparseMap | None = None  # a sparse file: ``size`` bytes stored, expanded
    #: a hard link: the name of the file it links to, whose bytes it is served with
    #: (:func:`~.members.served_links`); ``None`` for a file
    link: str | None = None


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


_HIGH_BYTES = bytes(range(128, 256))


def header_ok(block: bytes) -> bool:
    """True when ``block`` is a tar header with a valid checksum."""
    if len(block) < BLOCK or block.count(0) == BLOCK:
        return False
    try:
        stored = _number(block[148:156], "checksum", "")
    except CorruptArchiveError:
        return False
    unsigned = header_sum(block)
    if stored == unsigned:
        return True
    rest = block[:148] + block[156:512]
    high = len(rest) - len(rest.translate(None, _HIGH_BYTES))  # bytes read as negative
    return stored == unsigned - 256 * high


def only_zero_blocks(source: ByteSource, head: bytes) -> bool:
    """Whether ``source`` is whole zero blocks, two at least: an empty tar (GNU tar writes 20).

    ``head``: its first block, which decides at once for almost every other file.
    """
    size = source.size()
    if size < 2 * BLOCK or size % BLOCK or head.count(0) != len(head):
        return False
    step = 1 << 20
    for start in range(0, size, step):
        chunk = source.pread(start, min(step, size - start))
        if len(chunk) != min(step, size - start) or chunk.count(0) != len(chunk):
            return False
    return True


def header_sum(block: bytes) -> int:
    """The header's checksum as POSIX sums it: its bytes, the checksum field as 8 spaces.

    Adler-32's low half is 1 + the byte sum modulo 65521, exact for up to 256 bytes (at most
    65,280): three pieces of at most 244 bytes, summed in C (a fourth of ``sum`` over bytes).
    """
    a = zlib.adler32
    return (
        (a(block[:148]) & 0xFFFF) + (a(block[156:400]) & 0xFFFF) + (a(block[400:512]) & 0xFFFF)
        - 3 + 8 * 32
    )  # fmt: skip


def padded(size: int) -> int:
    """``size`` rounded up to whole 512-byte tar blocks."""
    return (size + BLOCK - 1) // BLOCK * BLOCK


# Meta-records (long names, pax) are small; cap them so a forged size cannot exhaust memory.
MAX_META = 1 << 20
#: meta-records before one entry: writers put one to three there (long name, long link, pax)
MAX_META_RUN = 32
#: GNU long name / link, pax per-file / global; ``X``: the per-file pax header as Solaris tar
#: and star wrote it (tarfile, GNU tar and bsdtar read it as ``x``)
META_KINDS = (b"L", b"x", b"X", b"g", b"K")
DIR_KINDS = (b"5", b"D")  # directories (GNU dumpdir too): left out, as directories are
#: entries that carry no data whatever their size field says (Go, tarfile and bsdtar agree)
HEADER_ONLY = (b"1", b"2", b"3", b"4", b"5", b"6")
HARD_LINK = b"1"
SKIPPED = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"6": "FIFO",
    b"V": "volume label",
    b"M": "continuation of a multi-volume member",
}
POSIX_MAGIC = b"ustar\x00"  # POSIX ustar (a name prefix at 345); GNU's is b"ustar  \x00"


def scan(
    read: Callable[[int], bytes],
    skip: Callable[[int], None],
    archive: str,
    on_member: Callable[[TarMember], None],
    on_skip: Callable[[str, str], None] | None = None,
    start: int = 0,
    end: int | None = None,
) -> int:
    """Walk a tar stream, calling ``on_member`` for every regular file; returns its length.

    ``read(n)`` returns the next ``n`` bytes (short at the end), ``skip(n)`` passes over
    ``n`` bytes. A missing end-of-archive marker is accepted when the stream ends cleanly
    on a header boundary; an empty stream, or one that ends after a long-name or pax
    record, is corrupt. Links, devices and other entries that are not files are passed to
    ``on_skip(name, reason)``. A sparse file is a member with its map (``sparse``): ``size``
    bytes stored from ``data_offset``, expanded when read. ``start``: the stream offset
    ``read`` is at, a header that no long name or pax record comes before (the walk goes on
    there). ``end``: the stream's length where it is known (a plain tar's size): an entry
    whose data or padding runs past it is refused (:class:`TruncatedArchiveError`, as a
    stream that ends inside an entry is), not listed with the entries before it.
    """
    pos = start
    meta = _Meta()
    while True:
        block = read(BLOCK)
        if not _is_header(block, pos, archive):
            _check_end(block, pos, meta, archive)
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
        size = 0 if kind in HEADER_ONLY else meta.size(size, archive)
        if kind in REGULAR or kind == sparse.OLD_GNU:
            member, before, within = _member(block, read, header_offset, size, meta, archive)
            pos += before
            if end is not None:
                _check_fits(header_offset, pos, size, end, archive, member.name)
            on_member(member)
        elif kind == HARD_LINK:  # no data: served as its target, once the walk is done
            within = 0
            on_member(TarMember(meta.name(block), header_offset, pos, 0, 0, link=meta.link(block)))
        else:
            within = 0
            if end is not None and size:
                _check_fits(header_offset, pos, size, end, archive, meta.name(block))
            if on_skip is not None and kind not in DIR_KINDS:
                on_skip(meta.name(block), _skip_reason(kind, block, meta))
        if size:
            skip(padded(size) - within)
            pos += padded(size)
        meta = _Meta()


class _Found(Exception):
    """Ends :func:`first_entry`'s walk at the first entry."""

    def __init__(self, member: TarMember | None, kind: str = "") -> None:
        super().__init__()
        self.member, self.kind = member, kind


def first_entry(span: bytes, archive: str) -> TarMember:
    """The regular file whose header (meta records, then its header block) is ``span``.

    Offsets are relative to ``span``. :class:`CorruptArchiveError` when ``span`` is not
    exactly that: no header, a bad one, an entry that is not a file, bytes after its header.
    """

    def member(m: TarMember) -> None:
        raise _Found(m) if m.link is None else _Found(None, SKIPPED[HARD_LINK])

    def other(name: str, why: str) -> None:
        raise _Found(None, why)

    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        out = span[pos : pos + n]
        pos += len(out)
        return out

    def skip(n: int) -> None:
        raise _Found(None, "a folder")

    found = _Found(None, "none there")
    try:
        scan(read, skip, archive, member, other)
    except _Found as stop:
        found = stop
    m = found.member
    if m is None:
        why = found.kind if found.kind == "none there" else f"{found.kind}, not a file"
        raise CorruptArchiveError(f"tar header: {why}", archive=archive)
    if m.data_offset != len(span) or m.refused or m.sparse is not None:
        raise CorruptArchiveError("tar header: not a plain file header", archive=archive)
    return m


def _check_fits(header: int, at: int, size: int, end: int, archive: str, name: str) -> None:
    """Refuse the entry at ``header`` whose ``size`` bytes at ``at``, padded, pass ``end``.

    Its data cut short, or only its padding: tarfile and GNU tar refuse both, as the walk
    of a compressed stream does (it reads the padding).
    """
    if at + padded(size) <= end:
        return
    there = max(0, min(size, end - at))
    what = f"data cut short ({there} of {size} bytes)" if there < size else "padding cut short"
    raise TruncatedArchiveError(
        f"tar entry at {header}: {what}, the archive ends at {end}",
        archive=archive,
        member=name,
    )


def _member(
    block: bytes, read: Callable[[int], bytes], at: int, size: int, meta: _Meta, archive: str
) -> tuple[TarMember, int, int]:
    """The member of the file header ``block`` at ``at``.

    Returns it, the bytes read after the header that are not data (old GNU extension
    blocks) and those read from the data (a pax 1.0 sparse map).
    """
    name, mtime = meta.name(block), meta.mtime(block, archive)
    start = at + BLOCK
    if block[156:157] == sparse.OLD_GNU:
        real, runs, before = sparse.old_gnu(block, read, at, archive)
        smap = sparse.checked(real, runs, size, at, archive)
        return TarMember(name, at, start + before, size, mtime, sparse=smap), before, 0
    form = sparse.pax_form(meta.pax)
    if form is None:
        return TarMember(name, at, start, size, mtime), 0, 0
    real = sparse.pax_real_size(meta.pax, size)
    if form in ("0.0", "0.1"):
        numbers = sparse.pax_runs(form, meta.pax, meta.records)
        smap = sparse.checked(real, numbers, size, at, archive)
        return TarMember(name, at, start, size, mtime, sparse=smap), 0, 0
    if form == "1.0":
        numbers, within = sparse.pax1_map(read, at, archive)
        if within > padded(size):
            raise CorruptArchiveError(
                f"tar sparse header at {at}: the map runs past the member", archive=archive
            )
        stored = max(size - within, 0)
        smap = sparse.checked(real, numbers, stored, at, archive)
        return TarMember(name, at, start + within, stored, mtime, sparse=smap), 0, within
    why = sparse.refusal(f"pax {form}")
    return TarMember(name, at, start, real, mtime, refused=why), 0, 0


def _skip_reason(kind: bytes, block: bytes, meta: _Meta) -> str:
    return skip_reason(kind, meta.link(block) if kind in (b"1", b"2") else "")


def skip_reason(kind: bytes, link: str) -> str:
    """Why an entry of type ``kind`` is skipped; ``link``: a link's target."""
    what = SKIPPED.get(kind, f"entry type {kind!r}, not a regular file")
    if kind in (b"1", b"2"):
        return f"{what} to {link!r}"
    return what


def _check_end(block: bytes, pos: int, meta: _Meta, archive: str) -> None:
    """Refuse an end that leaves the stream empty or a meta record without its member."""
    if pos == 0 and len(block) == 0:
        raise CorruptArchiveError(
            "empty tar stream (not even an end-of-archive marker)", archive=archive
        )
    if meta.at is not None:
        raise CorruptArchiveError(
            f"tar record at {meta.at} (long name or pax header) is not followed by a member",
            archive=archive,
        )


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
    """What meta-records said about the next entry: GNU long name and link, pax keys."""

    longname: str | None = None
    longlink: str | None = None
    pax: dict[str, str] = field(default_factory=dict)
    records: list[tuple[str, str]] = field(default_factory=list)  # pax, in order (0.0 maps)
    at: int | None = None  # offset of the first meta record (None: there was none)
    run: int = 0  # meta records read for this entry

    def size(self, size: int, archive: str) -> int:
        if "size" not in self.pax:
            return size
        value = self.pax["size"]
        if not value.isdigit() or not value.isascii():
            raise CorruptArchiveError("tar: bad pax size", archive=archive)
        return int(value)

    def name(self, block: bytes) -> str:
        for key in ("GNU.sparse.name", "path"):
            if key in self.pax:
                return self.pax[key]
        if self.longname is not None:
            return self.longname
        raw = block[0:100].split(b"\x00", 1)[0]
        if block[257:263] == POSIX_MAGIC:  # GNU headers keep atime / ctime there
            prefix = block[345:500].split(b"\x00", 1)[0]
            if prefix:
                raw = prefix + b"/" + raw
        return raw.decode("utf-8", "surrogateescape")

    def link(self, block: bytes) -> str:
        if "linkpath" in self.pax:
            return self.pax["linkpath"]
        if self.longlink is not None:
            return self.longlink
        return block[157:257].split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")

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
    meta.run += 1
    if meta.run > MAX_META_RUN:
        raise CorruptArchiveError(
            f"tar header at {at}: more than {MAX_META_RUN} meta-records (pax, long names) "
            "before one entry",
            archive=archive,
        )
    if size > MAX_META:
        raise CorruptArchiveError(f"tar header at {at}: {size}-byte meta record", archive=archive)
    data = read(padded(size))
    if len(data) < padded(size):
        raise TruncatedArchiveError(f"tar record at {at} cut short", archive=archive)
    text = data[:size].split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
    if kind == b"L":
        meta.longname = text
    elif kind == b"K":
        meta.longlink = text
    elif kind in (b"x", b"X"):
        records = parse_pax(data[:size], archive, at)
        meta.pax.update(records)
        meta.records += records
    else:  # a global pax header: checked, its keys not applied
        _check_global(parse_pax(data[:size], archive, at), at, archive)
        return padded(size)
    if meta.at is None:
        meta.at = at
    return padded(size)


#: keys of a global pax header that would change what the members after it are
GLOBAL_REFUSED = ("path", "linkpath", "size")


def _check_global(records: list[tuple[str, str]], at: int, archive: str) -> None:
    """Refuse a global pax header that names or sizes the members after it.

    GNU tar and tarfile apply it to every later member (all named alike), Go and bsdtar
    do not: two tools would list two different archives.
    """
    for key, _ in records:
        if key in GLOBAL_REFUSED or key.startswith("GNU.sparse."):
            raise CorruptArchiveError(
                f"tar header at {at}: a global pax header sets {key!r} "
                "(tar readers disagree on whether it applies to every member)",
                archive=archive,
            )


def build_header(name: str, size: int, mtime: float) -> bytes:
    """A tar header (with a pax record when the name or size needs one) for a regular file."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


END_OF_ARCHIVE = b"\x00" * (2 * BLOCK)
