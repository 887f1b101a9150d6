"""pax extended-header records, read by the rules Go's ``archive/tar`` applies.

A record is ``LENGTH KEY=VALUE`` and a newline, the length counting the whole record.
A record without its newline, a key that is empty or holds ``=`` or NUL, a NUL in a path,
link path or user / group name, and bytes after the last record are bad headers: Go's
reader rejects them (``ErrHeader``), so ours does too (:class:`CorruptArchiveError`),
rather than reading an archive two tools would list differently.
"""

from __future__ import annotations

from cdml_edge.archive.errors import CorruptArchiveError

#: keys whose value is a name: a NUL in them is a bad header
NAME_KEYS = frozenset(("path", "linkpath", "uname", "gname"))


def parse_pax(data: bytes, archive: str, at: int) -> list[tuple[str, str]]:
    """The ``(key, value)`` records of a pax header's data, in order (keys may repeat).

    ``at``: the header's offset, for the message.
    """
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos, pos + 21)
        digits = data[pos:sp] if sp > pos else b""
        if not digits.isdigit() or not digits.isascii():
            raise _bad(at, "no record length", archive)
        length = int(digits)
        if length < 5 or pos + length > len(data) or sp + 1 >= pos + length:
            raise _bad(at, f"record length {length} out of bounds", archive)
        rec = data[sp + 1 : pos + length]
        if rec[-1:] != b"\n":
            raise _bad(at, "record does not end with a newline", archive)
        key, eq, value = rec[:-1].partition(b"=")
        if not eq or not key:
            raise _bad(at, "record without a key", archive)
        text = key.decode("utf-8", "replace")
        if b"\x00" in key or (text in NAME_KEYS and b"\x00" in value):
            raise _bad(at, f"NUL in the record {text!r}", archive)
        out.append((text, value.decode("utf-8", "surrogateescape")))
        pos += length
    return out


def _bad(at: int, why: str, archive: str) -> CorruptArchiveError:
    return CorruptArchiveError(f"tar header at {at}: bad pax record: {why}", archive=archive)
