"""Selection of retained items: ``--filter`` expressions and ``--since``/``--until`` times.

A filter is ``FIELD OP VALUE`` with ``OP`` one of ``= != > >= < <=``; several filters
must all hold. Fields of an item:

* ``label`` — the effective label (a human relabel if there is one, else the model's);
* ``model_label`` — the model's label; ``relabelled`` — ``true`` when a human set it;
* ``score`` — the model's score for its label; ``anomaly`` — the anomaly score;
* ``anomalous`` — the model's anomaly flag (``true``/``false``);
* ``source``, ``device``, ``modality``, ``window``, ``name``.

Numeric comparisons on an item without that number (e.g. ``anomaly>0.8`` on a
classifier's item) are false.
"""

from __future__ import annotations

import math
import operator
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cdml_edge.archive.names import normalize_member_name
from cdml_edge.errors import CdmlError
from cdml_edge.retrain.errors import OptionError
from cdml_edge.units import DURATION_PATTERN, parse_duration, quantity_pattern

NUMERIC_FIELDS = frozenset({"score", "anomaly"})
BOOL_FIELDS = frozenset({"anomalous", "relabelled"})
TEXT_FIELDS = frozenset({"label", "model_label", "source", "device", "modality", "window", "name"})
FIELDS = NUMERIC_FIELDS | BOOL_FIELDS | TEXT_FIELDS

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "!=": operator.ne,
    "==": operator.eq,
    "=": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([A-Za-z_]+)\s*(>=|<=|!=|==|=|>|<)\s*(.*?)\s*$")
_PLAIN_NUMBER = re.compile(quantity_pattern({""}))  # the configuration's numbers, no unit


def plain_number(text: str) -> float | None:
    """``text`` as a finite number of the configuration's grammar, a sign allowed; else None.

    Not Python's ``float``: that takes ``nan``, ``inf`` and ``1_000`` too.
    """
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or body != body.strip() or not _PLAIN_NUMBER.fullmatch(body):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


class FilterError(CdmlError, ValueError):
    """A ``--filter`` / time expression that cannot be used; names the expression."""

    def __init__(self, expr: str, reason: str) -> None:
        super().__init__(f"filter {expr!r}: {reason}")
        self.expr = expr
        self.reason = reason


@dataclass(frozen=True)
class ItemFilter:
    """One parsed ``FIELD OP VALUE`` condition."""

    field: str
    op: str
    value: str | float | bool
    expr: str

    def __call__(self, item: Mapping[str, Any]) -> bool:
        """Whether ``item`` (the fields filters see) matches; a missing or NaN number never does."""
        have = item.get(self.field)
        if self.field in NUMERIC_FIELDS:
            if have is None or (isinstance(have, float) and math.isnan(have)):
                return False
            return _OPS[self.op](float(have), self.value)
        if self.field in BOOL_FIELDS:
            return _OPS[self.op](bool(have), self.value)
        return _OPS[self.op]("" if have is None else str(have), self.value)


def parse_filter(expr: str) -> ItemFilter:
    """Parse ``label=defect``, ``anomaly>0.8``, ``relabelled=true`` ..."""
    m = _EXPR.match(expr)
    if not m:
        raise FilterError(expr, "expected FIELD OP VALUE, e.g. label=defect or anomaly>0.8")
    field, op, raw = m.group(1).lower(), m.group(2), m.group(3).strip().strip("'\"")
    if field not in FIELDS:
        raise FilterError(expr, f"unknown field {field!r} (fields: {', '.join(sorted(FIELDS))})")
    value: str | float | bool
    if field in NUMERIC_FIELDS:
        number = plain_number(raw)
        if number is None:
            raise FilterError(expr, f"{field} takes a number, got {raw!r}")
        value = number
    elif field in BOOL_FIELDS:
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise FilterError(expr, f"{field} takes true or false, got {raw!r}")
        if op not in ("=", "==", "!="):
            raise FilterError(expr, f"{field} only takes = or !=")
        value = raw.lower() in ("true", "1", "yes")
    else:
        if op not in ("=", "==", "!="):
            raise FilterError(expr, f"{field} is text: only = or != apply")
        value = normalize_member_name(raw) if field == "name" else raw
    return ItemFilter(field, op, value, expr)


def parse_filters(exprs: Sequence[str]) -> list[ItemFilter]:
    """:func:`parse_filter` each of ``exprs``; the first bad one raises ``FilterError``."""
    return [parse_filter(e) for e in exprs]


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from ``1790000000``, ISO 8601 or an age such as ``7d`` / ``12h``.

    ISO 8601: ``2026-12-01``, ``…T10:00:00Z``; naive times are UTC. An age is that long
    before ``now``.
    """
    s = text.strip()
    seconds = plain_number(s)
    if seconds is not None:
        return seconds
    if re.fullmatch(DURATION_PATTERN, s):  # an age, written as the configuration's durations
        try:
            return (time.time() if now is None else now) - parse_duration(s)
        except ValueError as exc:
            raise FilterError(text, str(exc)) from None
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(
            text, "expected unix seconds, an ISO 8601 time (2026-12-01T10:00Z) or an age (7d)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def parse_when(text: str | None, option: str) -> float | None:
    """``--since``/``--until`` as unix seconds (None when not given).

    A bad time raises :class:`~cdml_edge.retrain.errors.OptionError` naming ``option``.
    """
    if text is None:
        return None
    try:
        return parse_time(text)
    except FilterError as exc:
        raise OptionError(f"{option}: {exc}") from exc
