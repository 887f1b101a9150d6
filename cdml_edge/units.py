"""Human-friendly sizes (``64MiB``), durations (``500ms``) and counts (``1 file``, ``2 files``)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection

_SIZE_UNITS: dict[str, float] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_DURATION_UNITS: dict[str, float] = {
    "": 1.0,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}

# The one grammar of a quantity written as text: a number (``1``, ``1.5``, ``.5``, ``1e3``),
# blanks, a unit of the table, blanks. The parser matches it and the configuration's JSON
# Schema exports it (:func:`quantity_pattern`), so an editor refuses what the loader refuses.
# It is written in the part of regex syntax that Python's ``re`` and ECMA-262 (the dialect of
# JSON Schema's ``pattern``) read the same way: ASCII classes only (their ``\s`` differ).
_BLANKS = r"[ \t\n\r\f\v]*"
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"
_WORD_UNIT = re.compile(rf"^{_BLANKS}({_NUMBER}){_BLANKS}([A-Za-z]+){_BLANKS}$")
"""A number and any word: to name an unknown unit in the error, not to accept it."""


def _any_case(unit: str) -> str:
    """``unit`` matched in any case, without flags: ``kib`` -> ``[kK][iI][bB]``."""
    return "".join(f"[{c.lower()}{c.upper()}]" for c in unit)


def quantity_pattern(units: Collection[str]) -> str:
    """The regex of a number followed by one of ``units`` (``""``: the unit may be left out).

    Units match in any case. The same string is the parser's rule and the JSON Schema
    ``pattern``: anchored with ``^``/``$``, ASCII classes only, no flags.
    """
    words = sorted((u for u in units if u), key=lambda u: (-len(u), u))
    unit = "(" + "|".join(_any_case(u) for u in words) + ")"
    if "" in units:
        unit += "?"
    return rf"^{_BLANKS}({_NUMBER}){_BLANKS}{unit}{_BLANKS}$"


SIZE_PATTERN = quantity_pattern(_SIZE_UNITS)
"""A size written as text: ``4096``, ``512KiB``, ``1.5GB``, ``1e3``."""
DURATION_PATTERN = quantity_pattern(_DURATION_UNITS)
"""A duration written as text: ``2``, ``500ms``, ``5min``, ``7d``."""
_SIZE_TEXT = re.compile(SIZE_PATTERN)
_DURATION_TEXT = re.compile(DURATION_PATTERN)

MAX_SIZE = 2**63 - 1
"""The largest size taken, in bytes (a signed 64-bit count: file offsets, ``st_size``)."""


def _scaled(
    value: str, rule: re.Pattern[str], units: dict[str, float], what: str, examples: str, known: str
) -> tuple[str, float]:
    """``value`` read by ``rule``: its number as written and the factor of its unit.

    ``what`` names the quantity in errors, with ``examples`` of it and the ``known`` units.
    """
    match = rule.fullmatch(value)
    if not match:
        word = _WORD_UNIT.fullmatch(value)
        if word is not None:
            raise ValueError(f"unknown {what} unit {word.group(2)!r} in {value!r} (use {known})")
        raise ValueError(f"not a {what}: {value!r} (examples: {examples})")
    number, unit = match.groups()
    return number, units[(unit or "").lower()]


def parse_size(value: object) -> int:
    """Parse a byte size: an integer, or a string such as ``64MiB``, ``1.5GB``, ``512k``.

    Decimal units (kB, MB, GB) are powers of 1000, binary units (KiB, MiB, GiB) powers of 1024.
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '64MiB'")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"a size in bytes must be whole, got {value}")
        value = int(value)
    if isinstance(value, int):
        if value > MAX_SIZE:
            raise ValueError(f"size out of range: {value} (at most {MAX_SIZE} bytes)")
        return value
    if not isinstance(value, str):
        raise ValueError("a size must be a number of bytes or a string like '64MiB'")
    number, factor = _scaled(
        value,
        _SIZE_TEXT,
        _SIZE_UNITS,
        "size",
        "4096, '512KiB', '64MiB', '2GB'",
        "B, kB, MB, GB, KiB, MiB, GiB",
    )
    # A whole number is counted exactly (a float has 53 bits), others rounded to the byte.
    size = int(number) * int(factor) if number.isdigit() else float(number) * factor
    if not math.isfinite(size) or size > MAX_SIZE:
        raise ValueError(f"size out of range: {value!r}")
    return int(round(size))


def size_from_env(name: str, default: int) -> int:
    """A positive byte size from the environment variable ``name`` (``default`` when unset).

    Written as in the configuration (``268435456``, ``256MiB``, ``1GB``); ``ValueError``
    naming the variable otherwise.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        size = parse_size(raw)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if size <= 0:
        raise ValueError(f"{name}: must be a positive size, got {raw!r}")
    return size


def parse_duration(value: object) -> float:
    """Parse a duration in seconds: a number, or a string such as ``2s``, ``500ms``, ``7d``."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or a string like '500ms'")
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"a duration must be finite, got {value!r}")
        return seconds
    if not isinstance(value, str):
        raise ValueError("a duration must be a number of seconds or a string like '500ms'")
    number, factor = _scaled(
        value,
        _DURATION_TEXT,
        _DURATION_UNITS,
        "duration",
        "2, '2s', '500ms', '5min', '7d'",
        "ms, s, min, h, d",
    )
    seconds = float(number) * factor
    if not math.isfinite(seconds):
        raise ValueError(f"duration out of range: {value!r}")
    return seconds


def format_size(n: int) -> str:
    """Format a byte count with binary units, e.g. ``64.0 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun in the right number: ``1 file``, ``0 files``, ``3 classes``.

    ``plural``: for a noun whose plural is not ``noun + "s"`` (or ``"es"`` after s, x, ch, sh).
    """
    if n == 1:
        return f"{n} {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{n} {plural}"
