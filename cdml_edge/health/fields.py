"""What the activity board keeps of a payload: typed, bounded and printable values.

The board reads messages it did not write: ``cdml-edge tail`` takes whatever arrives on the
broker's topics. Each value the views format is checked here, so a payload of the wrong
shape (a string where a number goes, a list where an object goes) is shown as missing
instead of stopping the view, and a text is cut to ``MAX_TEXT`` characters with control
characters, line breaks and bytes that are not UTF-8 escaped (a file name cannot forge a
line of ``tail``'s output or move its terminal's cursor).
"""

from __future__ import annotations

import math
from typing import Any

from cdml_edge.fsio import log_name

MAX_TEXT = 512
"""Characters of one text kept (an item name, a label, an error message)."""
MAX_TS = 1e11
"""Timestamps from 0 up to this (the year 5138) are kept; others would not format."""

NUMBERS = (
    "items",
    "windows",
    "errors",
    "dropped",
    "uptime_s",
    "outbox_depth",
    "outbox_bytes",
    "spool_bytes",
    "spool_records",
    "bytes_written",
    "thread_deaths",
)
"""Fields of a ``health`` message the views format as numbers."""


def text(value: Any) -> str | None:
    """``value`` as a printable text of at most ``MAX_TEXT`` characters; ``None`` if none.

    A number is shown as one; any other kind (an object, a list) counts as missing.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    shown = value if isinstance(value, str) else str(value)
    if not shown.isprintable():  # control characters, line breaks, raw bytes: escaped
        shown = log_name(shown)
    return shown if len(shown) <= MAX_TEXT else shown[: MAX_TEXT - 1] + "…"


def number(value: Any) -> int | float | None:
    """``value`` when it is a finite number (not a boolean), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def timestamp(value: Any) -> float | None:
    """``value`` when it is a Unix time a clock can show, else ``None``."""
    t = number(value)
    return float(t) if t is not None and 0 <= t < MAX_TS else None


def flag(value: Any) -> bool | None:
    """``value`` when it is a boolean, else ``None``."""
    return value if isinstance(value, bool) else None


def health(payload: dict[str, Any]) -> dict[str, Any]:
    """A ``health`` message with the fields the views format checked (wrong ones left out).

    The other fields are kept as they came (``tail --json`` shows them).
    """
    out = dict(payload)
    for key in NUMBERS:
        if key in out and number(out[key]) is None:
            del out[key]
    if "broker_connected" in out and flag(out["broker_connected"]) is None:
        del out["broker_connected"]
    degraded = out.pop("degraded", None)
    if isinstance(degraded, dict):
        out["degraded"] = {text(k) or "?": text(v) or "" for k, v in degraded.items()}
    dead = out.pop("dead_threads", None)
    if isinstance(dead, list):
        out["dead_threads"] = [t for t in map(text, dead) if t]
    return out
