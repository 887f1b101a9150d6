"""Human-friendly sizes (``64MiB``), durations (``500ms``) and counts (``1 file``, ``2 files``)."""

from __future__ import annotations

import math
import os
import re

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

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _scaled(value: str, units: dict[str, float], what: str, examples: str, known: str) -> float:
    """``value``, a number and one of ``units``, in the base unit.

    ``what`` names the quantity in errors, with ``examples`` of it and the ``known`` units.
    """
    match = _NUMBER_UNIT.match(value)
    if not match:
        raise ValueError(f"not a {what}: {value!r} (examples: {examples})")
    number, unit = match.groups()
    factor = units.get(unit.lower())
    if factor is None:
        raise ValueError(f"unknown {what} unit {unit!r} in {value!r} (use {known})")
    return float(number) * factor


def parse_size(value: object) -> int:
    """Parse a byte size: an integer, or a string such as ``64MiB``, ``1.5GB``, ``512k``.

    Decimal units (kB, MB, GB) are powers of 1000, binary units (KiB, MiB, GiB) powers of 1024.
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '64MiB'")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"a size in bytes must be whole, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError("a size must be a number of bytes or a string like '64MiB'")
    size = _scaled(
        value, _SIZE_UNITS, "size", "4096, '512KiB', '64MiB', '2GB'", "B, kB, MB, GB, KiB, MiB, GiB"
    )
    if not math.isfinite(size) or size > 2**63 - 1:
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
        size = parse_size(int(raw) if raw.isdigit() else raw)
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
    seconds = _scaled(
        value, _DURATION_UNITS, "duration", "2, '2s', '500ms', '5min', '7d'", "ms, s, min, h, d"
    )
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
