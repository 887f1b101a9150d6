"""What a retention ring holds, for the line that says a selection matched nothing.

``replay`` and ``export`` name the sources and the time span of the ring when their
``--source``, ``--since``/``--until`` or ``--filter`` selected no window, so a typo in a
source name is seen at once (it used to replay 0 windows, exit 0, with no hint).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.store.catalog import WindowRecord
from cdml_edge.store.sidecar import RetentionError, scan_retained
from cdml_edge.units import counted


def utc(ts: float) -> str:
    """``ts`` as an ISO 8601 UTC time to the second, e.g. ``2026-12-02T16:30:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass(frozen=True)
class RingContents:
    """The windows a ring holds, whatever a selection asks: their sources and time span."""

    windows: int
    sources: tuple[str, ...]
    first: float | None  # the earliest close time
    last: float | None

    @classmethod
    def of(cls, records: Sequence[WindowRecord]) -> RingContents:
        """What ``records`` (every window of a ring) hold."""
        if not records:
            return cls(0, (), None, None)
        closed = [r.closed_at for r in records]
        return cls(
            len(records), tuple(sorted({r.source for r in records})), min(closed), max(closed)
        )

    def describe(self) -> str:
        """E.g. ``the ring holds 3 windows of sources cam1, cam2, closed <first> to <last>``."""
        if not self.windows:
            return "the ring holds no window"
        named = ", ".join(ascii(s)[1:-1] for s in self.sources)
        noun = "source" if len(self.sources) == 1 else "sources"
        span = f"{utc(self.first or 0.0)} to {utc(self.last or 0.0)}"
        return f"the ring holds {counted(self.windows, 'window')} of {noun} {named}, closed {span}"


def ring_contents(directory: str | Path) -> RingContents:
    """Every window of the ring at ``directory`` (no selection); none when it cannot be read."""
    try:
        return RingContents.of(scan_retained(directory).records)
    except RetentionError:
        return RingContents(0, (), None, None)


def unknown_source(source: str | None, held: RingContents) -> str | None:
    """Why ``--source`` matches no window of the ring at all, or None when it may match."""
    if source is None or not held.windows or source in held.sources:
        return None
    return f"--source {ascii(source)[1:-1]}: no window of that source ({held.describe()})"


__all__ = ["RingContents", "ring_contents", "unknown_source", "utc"]
