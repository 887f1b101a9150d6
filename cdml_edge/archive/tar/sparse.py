"""GNU sparse files in tar: their maps read in every form, their holes expanded on read.

The forms are old GNU (type ``S``: up to four map entries in the header, more in 512-byte
extension blocks after it, each ending in an "is extended" byte) and the pax forms 0.0
(``GNU.sparse.offset`` / ``numbytes`` records), 0.1 (``GNU.sparse.map``) and 1.0
(``GNU.sparse.major=1``: the map as decimal lines at the start of the member's data, the
header named ``GNUSparseFile.0/...``). The stored data holds the runs that are not holes,
one after the other; a member is served expanded to its real size, as tarfile, GNU tar
and Go read it, listed under its real name. A map that contradicts itself (runs out of
order or past the real size, not adding up to the stored data) is a bad header, as Go
has it; a sparse format of another version is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cdml_edge.archive.errors import CorruptArchiveError, TruncatedArchiveError

BLOCK = 512
OLD_GNU = b"S"
_EXT_FLAG = 504  # "is extended" byte of an extension block (after 21 map entries)
_HEADER_FLAG = 482  # the same byte in the header (after its 4 map entries)
MAX_MAP_BYTES = 1 << 20  # a pax 1.0 map longer than this is a forged one


@dataclass(frozen=True)
class SparseMap:
    """A sparse member: its real size and the runs of data ``(offset, length)`` in order."""

    real_size: int
    runs: tuple[tuple[int, int], ...]

    def expand(self, stored: bytes) -> bytes:
        """The member's content: the stored runs placed at their offsets, zeros between."""
        out = bytearray(self.real_size)
        pos = 0
        for off, length in self.runs:
            out[off : off + length] = stored[pos : pos + length]
            pos += length
        return bytes(out)


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\x00", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return -1


def _entries(block: bytes, start: int, count: int) -> list[tuple[int, int]]:
    out = []
    for k in range(count):
        at = start + 24 * k
        off, length = _octal(block[at : at + 12]), _octal(block[at + 12 : at + 24])
        if off == 0 and length == 0 and not block[at : at + 24].strip(b"\x00"):
            break  # an unused slot
        out.append((off, length))
    return out


def old_gnu(
    block: bytes, read: Callable[[int], bytes], at: int, archive: str
) -> tuple[int, list[tuple[int, int]], int]:
    """The old GNU sparse header ``block`` (at ``at``) and its extension blocks.

    Returns ``(real size, runs, bytes of extension blocks taken)``.
    """
    runs = _entries(block, 386, 4)
    taken = 0
    extended = block[_HEADER_FLAG]
    while extended:
        ext = read(BLOCK)
        if len(ext) < BLOCK:
            raise TruncatedArchiveError(
                f"tar sparse header at {at}: extension block cut short", archive=archive
            )
        taken += BLOCK
        runs += _entries(ext, 0, 21)
        extended = ext[_EXT_FLAG]
    return _octal(block[483:495]), runs, taken


def pax_form(pax: dict[str, str]) -> str | None:
    """``"1.0"``, ``"0.1"`` or ``"0.0"`` when pax records describe a sparse member."""
    if "GNU.sparse.major" in pax or "GNU.sparse.realsize" in pax:
        return f"{pax.get('GNU.sparse.major', '1')}.{pax.get('GNU.sparse.minor', '0')}"
    if "GNU.sparse.map" in pax:
        return "0.1"
    if "GNU.sparse.numblocks" in pax or "GNU.sparse.offset" in pax:
        return "0.0"
    return None


def pax_real_size(pax: dict[str, str], stored: int) -> int:
    """The real (expanded) size pax records give a sparse member; ``stored`` if none."""
    for key in ("GNU.sparse.realsize", "GNU.sparse.size"):
        value = pax.get(key, "")
        if value.isdigit():
            return int(value)
    return stored


def pax_runs(form: str, pax: dict[str, str], records: Sequence[tuple[str, str]]) -> list[int]:
    """The flat ``offset, length, ...`` numbers of a pax 0.0 or 0.1 map (``-1``: not a number)."""
    if form == "0.1":
        text = pax.get("GNU.sparse.map", "")
        return [_decimal(x) for x in text.split(",")] if text else []
    keys = ("GNU.sparse.offset", "GNU.sparse.numbytes")
    return [_decimal(v) for k, v in records if k in keys]


def pax1_map(read: Callable[[int], bytes], at: int, archive: str) -> tuple[list[int], int]:
    """The map of a pax 1.0 member, read from the start of its data.

    Returns the flat ``offset, length, ...`` numbers and the bytes it took (whole blocks).
    """
    data = b""
    while True:
        block = read(BLOCK)
        if len(block) < BLOCK:
            raise TruncatedArchiveError(f"tar sparse map at {at} cut short", archive=archive)
        data += block
        lines = data.split(b"\n")
        count = _decimal(lines[0].decode("ascii", "replace")) if len(lines) > 1 else None
        if count is not None and (count < 0 or len(lines) > 2 * count + 1):
            break
        if len(data) >= MAX_MAP_BYTES:
            raise CorruptArchiveError(f"tar sparse map at {at} too long", archive=archive)
    numbers = [_decimal(x.decode("ascii", "replace")) for x in lines[1 : 2 * count + 1]]
    if count < 0:
        numbers = [-1]
    return numbers, len(data)


def _decimal(text: str) -> int:
    return int(text) if text.isdigit() and text.isascii() else -1


def checked(
    real: int, runs: Sequence[tuple[int, int]] | Sequence[int], stored: int, at: int, archive: str
) -> SparseMap:
    """A :class:`SparseMap` from ``runs`` (pairs, or flat numbers), checked as Go checks it.

    Runs must be numbers, in order, not overlapping, inside the real size, and add up to
    the ``stored`` bytes of data.
    """
    pairs = _pairs(runs)
    if pairs is None:
        raise _bad(at, "the map is not pairs of numbers", archive)
    end = 0
    for off, length in pairs:
        if off < end or length < 0 or off + length > real:
            raise _bad(at, f"run ({off}, {length}) out of order or past {real} bytes", archive)
        end = off + length
    if sum(length for _, length in pairs) != stored:
        raise _bad(at, f"runs do not add up to the {stored} bytes stored", archive)
    return SparseMap(real, tuple(pairs))


def _pairs(runs: Sequence[tuple[int, int]] | Sequence[int]) -> list[tuple[int, int]] | None:
    if runs and isinstance(runs[0], tuple):
        pairs = [(int(a), int(b)) for a, b in runs]  # type: ignore[misc]
    else:
        flat = [int(x) for x in runs]  # type: ignore[arg-type]
        if len(flat) % 2:
            return None
        pairs = list(zip(flat[::2], flat[1::2], strict=True))
    return None if any(a < 0 or b < 0 for a, b in pairs) else pairs


def _bad(at: int, why: str, archive: str) -> CorruptArchiveError:
    return CorruptArchiveError(f"tar sparse header at {at}: {why}", archive=archive)


def refusal(form: str) -> str:
    """The reason a sparse member of an unknown ``form`` is refused."""
    return f"GNU sparse file of format {form}: not a format this reader knows"
