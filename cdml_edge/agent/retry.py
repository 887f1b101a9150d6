"""What happens to a window's files when the window fails: retried with backoff, or quarantined.

Two failures are told apart. A window that failed as a whole (a model error, say) counts an
attempt against each of its files: a file is taken again after ``RETRY_BACKOFF_S`` doubling
per attempt, and quarantined once it was in ``WINDOW_ATTEMPTS`` failed windows (a file of an
``on_done: keep`` folder is left in place instead, and kept until it changes). A window the
output refused (disk full, publisher closed) is not the files' fault: they are put back
without an attempt counted, never quarantined for it, each taken again after
``OUTPUT_PAUSE_S`` doubling per refusal of that file up to ``OUTPUT_PAUSE_MAX_S`` (a file
delivered starts again at ``OUTPUT_PAUSE_S``), and intake pauses for ``OUTPUT_PAUSE_S``.
A window refused because stdout's reader went away (``| head -1``) is not retried at all:
nothing will take its results, so the agent stops (one line says why) and its files stay
for the next run.

A window the retention ring wanted but could not write (a full disk, an I/O error) has its
results published, but with ``retention.required`` its files are held: left on disk, not
taken again, and put back all at once when the ring writes again (at most ``HELD_MAX`` are
remembered; the rest stay on disk for the next start's scan). While files are held, the
oldest one is offered again every ``RETENTION_PROBE_S``: its window tries the ring, so a disk
that got room again is noticed even when no new file arrives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from cdml_edge.agent.error_events import ErrorReporter
from cdml_edge.backoff import backoff_delay
from cdml_edge.health import Metrics
from cdml_edge.intake.base import KEPT_IN_PLACE
from cdml_edge.intake.factory import Source
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.folder import FolderSource
from cdml_edge.outputs.jsonl import stop_for_closed_stdout
from cdml_edge.window.items import Window
from cdml_edge.window.topics import OutMessage

WINDOW_ATTEMPTS = 3  # a file whose whole window failed this often is quarantined
RETRY_BACKOFF_S = 0.5  # first retry after 0.5 s, then 1 s, 2 s ...
OUTPUT_PAUSE_S = 1.0  # intake pause, and a file's first retry, after the output refused it
OUTPUT_PAUSE_MAX_S = 30.0  # a file the output keeps refusing is taken again this often
OUTPUT_REFUSED_MAX = 4096  # files whose refusals are remembered (the oldest forgotten first)
HELD_MAX = 4096  # files held for the ring that are remembered (the rest: next start's scan)
RETENTION_PROBE_S = 10.0  # while files are held, one is offered again this often


class Attempts:
    """Failed windows per item id (files only); kept across reloads, thread-safe.

    At most ``OUTPUT_REFUSED_MAX`` items are remembered, the oldest forgotten first (a file
    that failed and then went away is never scored again to clear its count).
    """

    def __init__(self) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def fail(self, item_id: str) -> int:
        """Count one more failed window for ``item_id``; the count so far.

        An item that reaches ``WINDOW_ATTEMPTS`` is forgotten (it is quarantined).
        """
        with self._lock:
            n = self._counts.pop(item_id, 0) + 1
            if n < WINDOW_ATTEMPTS:
                self._counts[item_id] = n
            while len(self._counts) > OUTPUT_REFUSED_MAX:
                self._counts.popitem(last=False)
            return n

    def clear(self, item_ids: Iterable[str]) -> None:
        """The items were scored: their earlier failures no longer count."""
        with self._lock:
            for i in item_ids:
                self._counts.pop(i, None)

    def __contains__(self, item_id: object) -> bool:
        """Whether ``item_id`` was in a failed window and is to come again."""
        with self._lock:
            return item_id in self._counts


class OutputRefusals:
    """Output refusals per item id (files only): how long each file waits; thread-safe.

    Never a reason to quarantine. At most ``OUTPUT_REFUSED_MAX`` files are remembered.
    """

    def __init__(self) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def delay(self, item_id: str) -> float:
        """Count one more refusal of ``item_id``; the seconds before it is taken again."""
        with self._lock:
            n = self._counts.pop(item_id, 0) + 1
            self._counts[item_id] = n
            while len(self._counts) > OUTPUT_REFUSED_MAX:
                self._counts.popitem(last=False)
        return backoff_delay(n - 1, OUTPUT_PAUSE_S, OUTPUT_PAUSE_MAX_S)

    def clear(self, item_ids: Iterable[str]) -> None:
        """The items' results were delivered (or given up on): they start again."""
        with self._lock:
            for i in item_ids:
                self._counts.pop(i, None)

    def __contains__(self, item_id: object) -> bool:
        """Whether the output refused ``item_id``'s window and it is to come again."""
        with self._lock:
            return item_id in self._counts


class WindowRetryPolicy:
    """Applies the module's policy to the windows of the running sources."""

    def __init__(
        self,
        sources: Mapping[str, Source],
        lifecycle: FileLifecycle,
        errors: ErrorReporter,
        metrics: Metrics,
        attempts: Attempts,
        stopped: threading.Event,
        refusals: OutputRefusals | None = None,
    ) -> None:
        self.sources = sources
        self.lifecycle = lifecycle
        self.errors = errors
        self.metrics = metrics
        self.attempts = attempts
        self._stopped = stopped
        self._held: list[tuple[str, Path]] = []
        self._held_lock = threading.Lock()
        self.held_total = 0  # files ever held for the ring
        self.held_unlisted = 0  # held beyond HELD_MAX: taken again only at the next start
        self._probe: threading.Timer | None = None
        self.refusals = refusals or OutputRefusals()  # kept across reloads by the agent

    def taken_again(self, item_id: str) -> bool:
        """Whether ``item_id`` comes again: its window failed or the output refused it.

        Such an item is not counted as taken in a second time. One the policy forgot (more
        than ``OUTPUT_REFUSED_MAX`` refused, or quarantined) is counted again.
        """
        return item_id in self.attempts or item_id in self.refusals

    def hold_for_retention(self, source: str, path: Path, ring_failing: Callable[[], bool]) -> None:
        """Keep a scored file on disk, not taken again, until :meth:`retention_recovered`.

        It is taken again at once if the ring already writes again (``ring_failing()`` false).
        """
        src = self.sources.get(source)
        if src is None:
            return
        with self._held_lock:
            if not ring_failing():
                src.retry(path, 0.0)
                return
            src.hold(path)
            self.held_total += 1
            if len(self._held) < HELD_MAX:
                self._held.append((source, path))
            else:
                self.held_unlisted += 1
            if self._probe is None:
                self._probe = threading.Timer(RETENTION_PROBE_S, self._offer_oldest)
                self._probe.daemon = True
                self._probe.start()

    def _offer_oldest(self) -> None:
        """Offer the oldest held file again: its window tries the ring once more."""
        with self._held_lock:
            self._probe = None
            first = self._held.pop(0) if self._held else None
        if first is not None and not self._stopped.is_set():
            src = self.sources.get(first[0])
            if src is not None:
                src.retry(first[1], 0.0)

    def retention_recovered(self) -> None:
        """The ring writes again: every held file is taken again now."""
        with self._held_lock:
            held, self._held = self._held, []
        for source, path in held:
            src = self.sources.get(source)
            if src is not None:
                src.retry(path, 0.0)

    @property
    def held(self) -> int:
        """Files held for the ring now."""
        with self._held_lock:
            return len(self._held)

    def output_failed(self, window: Window) -> None:
        """Put the window's files back with a backoff, pause intake for ``OUTPUT_PAUSE_S``.

        Each file is taken again after ``OUTPUT_PAUSE_S`` doubling per refusal of it, at
        most ``OUTPUT_PAUSE_MAX_S``. No attempt is counted against the files (camera frames
        are lost, counted by the error metric).
        """
        src = self.sources.get(window.source)
        if src is None:
            return
        for it in window.items:
            if it.path is not None:
                src.retry(it.path, self.refusals.delay(it.item_id))
        self._pause_intake(OUTPUT_PAUSE_S)

    def delivered(self, item_ids: Iterable[str]) -> None:
        """The items' results are durable (or given up on): their refusals no longer count."""
        self.refusals.clear(item_ids)

    def output_closed(self, window: Window) -> None:
        """Stdout's reader went away: the window's files stay for the next run; stop.

        The first window says so in one line and sets the agent's stop (as SIGTERM does);
        the windows drained after it go quietly. Its files are put back, to be taken again
        only after the stop (that is, by the next run's scan).
        """
        src = self.sources.get(window.source)
        for it in window.items:
            if it.path is not None and src is not None:
                src.retry(it.path, OUTPUT_PAUSE_MAX_S)
        stop_for_closed_stdout(self._stopped)

    def window_failed(self, window: Window, exc: Exception) -> None:
        """Retry or quarantine the files of a window that failed as a whole.

        A quarantined file gets an error event naming it. A file of an ``on_done: keep``
        folder is never moved: it is left where it is, kept (not taken again until it
        changes) and reported once the same way, ``quarantined_path`` null. Camera frames
        are not retried (the window's error event counts them): the camera has moved on and
        holding frames would defeat the budget.
        """
        errors: list[OutMessage] = []
        src = self.sources.get(window.source)
        keep = isinstance(src, FolderSource) and src.spec.keep
        for it in window.items:
            if it.path is None:
                continue
            n = self.attempts.fail(it.item_id)
            if n < WINDOW_ATTEMPTS:
                if src is not None:
                    src.retry(it.path, RETRY_BACKOFF_S * 2 ** (n - 1))
                continue
            self.metrics.errors.labels(stage="window_retries").inc()
            if keep:  # the user's file: the fault may be the model's, never moved for it
                dest, said = None, f"failed in {n} windows: {exc}{KEPT_IN_PLACE}"
                self.lifecycle.left_in_place += 1
            else:
                dest = self.lifecycle.quarantine(window.source, it.name, it.path, None)
                said = f"failed in {n} windows, quarantined: {exc}"
            if src is not None:
                src.release(it.path, keep=keep)
            errors.append(self.errors.event(window.source, it.name, type(exc).__name__, said, dest))
        if errors:
            self.errors.publish(errors)

    def _pause_intake(self, seconds: float) -> None:
        for s in self.sources.values():
            s.pause(True)

        def resume() -> None:
            if not self._stopped.is_set():
                for s in self.sources.values():
                    s.pause(False)

        t = threading.Timer(seconds, resume)
        t.daemon = True
        t.start()
