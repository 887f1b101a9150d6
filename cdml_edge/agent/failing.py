"""Sources whose recent items all failed: a part of the agent that is not working.

A window whose every item fails (a model that cannot take the camera's frames, a sensor
writing garbage) is no crash: the files are quarantined, error events go out, the pipeline
makes progress. Without this, ``/healthz`` said ``ok`` for as long as it lasted.
"""

from __future__ import annotations

import threading

FAILED_IN_A_ROW = 20
"""Items of one source failed one after the other, with none scored between, that make the
source degraded; one item scored clears it."""


class FailingSources:
    """Counts each source's items failed in a row (thread-safe)."""

    def __init__(self, threshold: int = FAILED_IN_A_ROW) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._in_a_row: dict[str, int] = {}
        self._last: dict[str, str] = {}  # source -> its last failure, "Type: message"

    def observe(self, source: str, scored: int, failed: int, last_error: str | None) -> None:
        """A window of ``source``: ``scored`` items scored, then ``failed`` items failed.

        Within a window the order is not known, so a window with any item scored ends the
        run of failures (and its failures start none).
        """
        with self._lock:
            if scored:
                self._in_a_row.pop(source, None)
                self._last.pop(source, None)
            elif failed:
                self._in_a_row[source] = self._in_a_row.get(source, 0) + failed
                self._last[source] = last_error or self._last.get(source, "no reason given")

    def degraded(self, sources: set[str] | None = None) -> dict[str, str]:
        """``{"source <name> items": why}`` for each source (of ``sources``) failing now."""
        with self._lock:
            return {
                f"source {name} items": f"its last {n} items all failed ({self._last[name]})"
                for name, n in self._in_a_row.items()
                if n >= self.threshold and (sources is None or name in sources)
            }
