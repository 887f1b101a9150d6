"""File names as the file system and the reader take them.

:func:`unique_name` finds a free name in a folder without overwriting, shortening names that
the file system would refuse as too long. :func:`display_name` and :func:`log_name` show a
file name that may hold bytes that are not UTF-8 (or control characters) in payloads and log
lines.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

NAME_MAX = 255  # bytes of one path component on Linux file systems


def _nbytes(text: str) -> int:
    """Bytes of ``text`` on disk (a name from ``os.fsdecode`` may hold escaped raw bytes)."""
    return len(text.encode("utf-8", "surrogateescape"))


def _cut(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` bytes, never half a character."""
    out, used = [], 0
    for ch in text:
        n = _nbytes(ch)
        if used + n > limit:
            break
        out.append(ch)
        used += n
    return "".join(out)


def fit_name(name: str, limit: int = NAME_MAX) -> str:
    """``name`` shortened (keeping its extension) to at most ``limit`` bytes on disk.

    Raw bytes that are not UTF-8 (``os.fsdecode``'s escapes) are kept, counted one byte each.
    """
    if _nbytes(name) <= limit:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or _nbytes(ext) > 16:
        stem, ext = name, ""
    keep = limit - (_nbytes(ext) + 1 if ext else 0)
    short = _cut(stem, keep)
    return f"{short}.{ext}" if ext else short


def display_name(name: str) -> str:
    r"""``name`` as valid UTF-8 text: each raw byte that is not UTF-8 shown as ``%XX``.

    Such a byte is kept by ``os.fsdecode`` as a lone surrogate. Everything else is unchanged
    (a literal ``%`` too).

    ``%`` and not ``\xNN``: a backslash would read as a path separator in archive member
    names.
    """
    if not any("\ud800" <= c <= "\udfff" for c in name):
        return name
    return "".join(_shown(c) for c in name)


def _shown(c: str) -> str:
    if "\udc80" <= c <= "\udcff":
        return f"%{ord(c) - 0xDC00:02X}"
    return "\ufffd" if "\ud800" <= c <= "\udfff" else c


_LOG_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def log_name(name: object) -> str:
    """``name`` (a path or a name) safe for one log line.

    As :func:`display_name`, with control characters, line separators and bidirectional
    overrides escaped.
    """
    text = display_name(str(name))
    return "".join(_LOG_ESCAPES.get(ord(c)) or (_escape(c) if _unsafe(c) else c) for c in text)


def _unsafe(c: str) -> bool:
    o = ord(c)
    return (
        o < 0x20
        or 0x7F <= o < 0xA0
        or o in (0x2028, 0x2029)
        or 0x202A <= o <= 0x202E
        or (0x2066 <= o <= 0x2069)
    )


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def unique_name(
    folder: str | os.PathLike[str],
    name: str,
    *,
    exists: Callable[[Path], bool] | None = None,
    attempts: int = 100_000,
) -> Path:
    """A path in ``folder`` for ``name`` that does not exist yet.

    ``name``, then ``stem.1.ext``, ``stem.2.ext``, ...; names too long for the file system
    are shortened.

    Raises ``FileExistsError`` when no free name is found within ``attempts``.
    """
    base = Path(folder)
    taken = exists or (lambda p: os.path.lexists(p))
    first = fit_name(name)
    if not taken(base / first):
        return base / first
    stem, dot, ext = first.rpartition(".")
    if not dot or not stem:
        stem, ext = first, ""
    for n in range(1, attempts):
        tail = f".{n}.{ext}" if ext else f".{n}"
        cand = _cut(stem, NAME_MAX - _nbytes(tail)) + tail
        if not taken(base / cand):
            return base / cand
    raise FileExistsError(f"{base / name}: no free name for it")
