"""GNU sparse files in tar: recognised in every form, so none is dropped or served raw.

The forms are old GNU (type ``S``: up to four map entries in the header, more in 512-byte
extension blocks after it, each ending in an "is extended" byte) and the pax forms 0.0
(``GNU.sparse.offset`` / ``numbytes`` records), 0.1 (``GNU.sparse.map``) and 1.0
(``GNU.sparse.major=1``: the map at the start of the member's data, the header named
``GNUSparseFile.0/...``). The stored data is the non-hole parts only, so serving it as the
member would give wrong bytes: each sparse member is listed under its real name and size
and reading it raises :class:`UnsupportedArchiveError` naming it. The extension blocks of
old GNU sparse members are walked, so the members after one read as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cdml_edge.archive.errors import TruncatedArchiveError

BLOCK = 512
OLD_GNU = b"S"
_EXT_FLAG = 504  # "is extended" byte of an extension block (after 21 map entries)
_HEADER_FLAG = 482  # the same byte in the header (after its 4 map entries)


def old_gnu_extensions(
    block: bytes, read: Callable[[int], bytes], at: int, archive: str
) -> tuple[int, int]:
    """Walk the extension blocks of the old GNU sparse header ``block`` (at ``at``).

    Returns ``(real size, bytes taken)``.
    """
    taken = 0
    extended = block[_HEADER_FLAG]
    while extended:
        ext = read(BLOCK)
        if len(ext) < BLOCK:
            raise TruncatedArchiveError(
                f"tar sparse header at {at}: extension block cut short", archive=archive
            )
        taken += BLOCK
        extended = ext[_EXT_FLAG]
    return _octal(block[483:495]), taken


def _octal(field: bytes) -> int:
    text = field.split(b"\x00", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return 0


def pax_form(pax: Mapping[str, str]) -> str | None:
    """``"1.0"``, ``"0.1"`` or ``"0.0"`` when pax records describe a sparse member."""
    if "GNU.sparse.major" in pax or "GNU.sparse.realsize" in pax:
        return f"{pax.get('GNU.sparse.major', '1')}.{pax.get('GNU.sparse.minor', '0')}"
    if "GNU.sparse.map" in pax:
        return "0.1"
    if "GNU.sparse.numblocks" in pax or "GNU.sparse.offset" in pax:
        return "0.0"
    return None


def pax_real_size(pax: Mapping[str, str], stored: int) -> int:
    """The real (expanded) size pax records give a sparse member; ``stored`` if none."""
    for key in ("GNU.sparse.realsize", "GNU.sparse.size"):
        value = pax.get(key, "")
        if value.isdigit():
            return int(value)
    return stored


def refusal(form: str) -> str:
    """The reason a sparse member of ``form`` is refused."""
    return f"GNU sparse file ({form}): holes are not expanded, so it is not read"
