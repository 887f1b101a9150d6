"""The summary lines ``cdml-edge run`` logs: one per health interval, one at exit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cdml_edge.units import counted, format_size
from cdml_edge.window.payloads import HealthPayload


class RunSummary:
    """Turns health payloads into log lines; :meth:`interval` counts since the last call."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self._last_t = self.started
        self._last: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)

    def interval(
        self, h: HealthPayload, anomalies: int, mqtt: bool = True, problems: Sequence[str] = ()
    ) -> str:
        """The line for one interval, counted since the last call.

        ``summary: +N items (R/s), +W windows, +A anomalies, +E errors, +D dropped; ...``;
        ``problems`` (a stall, say) are said after the queues.
        """
        now = self.clock()
        counts = (h.items, h.windows, anomalies, h.errors, h.dropped)
        d = [a - b for a, b in zip(counts, self._last, strict=True)]
        rate = d[0] / max(1e-9, now - self._last_t)
        self._last, self._last_t = counts, now
        return (
            f"summary: +{d[0]} items ({rate:.1f}/s), +{d[1]} windows, +{d[2]} anomalies, "
            f"+{d[3]} errors, +{d[4]} dropped; {_state(h, mqtt, problems)}"
        )

    def final(
        self, h: HealthPayload, anomalies: int, mqtt: bool = True, problems: Sequence[str] = ()
    ) -> str:
        """The line at exit, for the whole run.

        ``stopped after T s: N items (R/s), W windows, A anomalies, E errors, ...``
        """
        took = self.clock() - self.started
        rate = h.items / max(1e-9, took)
        return (
            f"stopped after {took:.1f} s: {h.items} items ({rate:.1f}/s), {h.windows} "
            f"windows, {anomalies} anomalies, {h.errors} errors, {h.dropped} dropped; "
            f"{_state(h, mqtt, problems)}"
        )


def _state(h: HealthPayload, mqtt: bool, problems: Sequence[str] = ()) -> str:
    """Queues, problems, parts dead or degraded now, the broker (``mqtt``: one is configured)."""
    parts = [
        f"outbox {h.outbox_depth}",
        f"spool {counted(h.spool_records, 'record')} ({format_size(h.spool_bytes)} on disk)",
        f"written {format_size(h.bytes_written)}",
        *problems,
    ]
    if h.dead_threads:
        parts.append("dead: " + ", ".join(sorted(h.dead_threads)))
    if h.degraded:
        parts.append("degraded: " + ", ".join(sorted(h.degraded)))
    if mqtt:
        parts.append("broker connected" if h.broker_connected else "broker not connected")
    return ", ".join(parts)
