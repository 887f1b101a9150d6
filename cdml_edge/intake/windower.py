"""Time windows per source and the pipeline's idle gate.

A :class:`Windower` collects the items of one source and closes the current window on
``seconds``, ``max_items`` or ``max_bytes``, whichever comes first (``max_items=1`` is
instant mode). With ``close_when_idle`` (dynamic batching) it also closes the window as soon
as the pipeline can take it: the :class:`PipelineGate` counts the windows handed to the
pipeline and not yet scored, and a worker that finishes one wakes the windowers. At low
rates every item is scored on arrival; while the workers are busy, items gather into bigger
windows up to the three limits, which stay upper bounds (``seconds`` is the longest an item
waits for its window to close).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cdml_edge.supervisor import Spawn, plain_thread
from cdml_edge.window.items import Item, Window, new_window_id

log = logging.getLogger(__name__)


class PipelineGate:
    """Whether the pipeline could start on a window now (thread-safe).

    Counts the windows closed and not yet scored (queued or in a worker). The pipeline is
    idle while that count is below the number of ``workers``. Every closed window is
    counted (:meth:`enter`, or :meth:`try_enter` for a window closed because the pipeline was
    idle) and uncounted once scored (:meth:`leave`), which wakes the windowers waiting for a
    free worker, one after the other from a rotating start so that no source starves.
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._busy = 0
        self._lock = threading.Lock()
        self._waiting: list[Callable[[], None]] = []
        self._next = 0

    @property
    def busy(self) -> int:
        """Windows closed and not yet scored."""
        return self._busy

    def subscribe(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on the worker's thread) whenever a window has been scored."""
        with self._lock:
            self._waiting.append(wake)

    def enter(self) -> None:
        """A window closed on its own limits goes to the pipeline, idle or not."""
        with self._lock:
            self._busy += 1

    def try_enter(self) -> bool:
        """Count a window in if a worker is free; ``False`` (nothing counted) otherwise."""
        with self._lock:
            if self._busy >= self.workers:
                return False
            self._busy += 1
            return True

    def leave(self) -> None:
        """A window has been scored: a worker is free, the windowers are told."""
        with self._lock:
            self._busy = max(0, self._busy - 1)
            waiting = self._waiting
            start = self._next % len(waiting) if waiting else 0
            self._next += 1
        for wake in waiting[start:] + waiting[:start]:
            wake()


@dataclass(frozen=True)
class WindowPolicy:
    """When a window closes: after ``seconds``, at ``max_items`` or at ``max_bytes``.

    And, with ``close_when_idle`` and a :class:`PipelineGate`, as soon as the pipeline is
    idle.
    """

    seconds: float = 1.0
    max_items: int = 64
    max_bytes: int = 16 * 1024 * 1024
    close_when_idle: bool = True

    @property
    def instant(self) -> bool:
        """Every item is a window of its own (``max_items`` is 1)."""
        return self.max_items == 1


class Windower:
    """Collects items of one source into windows and hands closed windows to ``on_close``.

    ``on_close`` runs on the caller's thread for size/count/idle closes, on the windower's
    timer thread for time closes and on a worker's thread when a freed worker closes the
    window; it must be quick (put the window on a queue). With a ``gate`` every closed
    window is counted into it, and the caller uncounts it (:meth:`PipelineGate.leave`) once
    scored.
    """

    def __init__(
        self,
        source: str,
        policy: WindowPolicy,
        on_close: Callable[[Window], None],
        gate: PipelineGate | None = None,
        spawn: Spawn = plain_thread,
    ) -> None:
        self.source = source
        self.policy = policy
        self._on_close = on_close
        self._gate = gate
        if gate is not None and policy.close_when_idle:
            gate.subscribe(self._wake)
        self._cond = threading.Condition()
        self._current: Window | None = None
        self._deadline = 0.0  # monotonic time the current window closes
        self._stopped = False
        self._thread = spawn(f"windower-{source}", self._timer_loop)
        self.windows_closed = 0

    def start(self) -> None:
        """Start the timer thread that closes windows on time."""
        self._thread.start()

    def add(self, item: Item) -> None:
        """Add an item; closes the window when it reaches ``max_items`` or ``max_bytes``."""
        closed: Window | None = None
        with self._cond:
            opened = self._current is None
            if opened:
                now = time.time()
                self._current = Window(new_window_id(self.source, now), self.source, now)
                self._deadline = time.monotonic() + self.policy.seconds
            w = self._current
            assert w is not None
            w.items.append(item)
            w.nbytes += item.nbytes
            w.charged += item.held
            if len(w.items) >= self.policy.max_items:
                closed = self._close_locked("max_items")
            elif w.nbytes >= self.policy.max_bytes:
                closed = self._close_locked("max_bytes")
            else:
                closed = self._close_if_idle_locked()
            if opened and closed is None:  # the timer thread learns the new deadline
                self._cond.notify_all()
        if closed is not None:
            self._emit(closed)

    def flush(self, reason: str = "stop") -> None:
        """Close the current window now, if it holds any item."""
        with self._cond:
            closed = self._close_locked(reason) if self._current is not None else None
        if closed is not None:
            self._emit(closed)

    def stop(self) -> None:
        """Close the open window and stop the timer thread."""
        self.flush("stop")
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def pending_items(self) -> int:
        """Items in the open window (0 when none is open)."""
        with self._cond:
            return len(self._current.items) if self._current else 0

    def _wake(self) -> None:
        """A worker is free: close the open window if the pipeline can still take it."""
        with self._cond:
            closed = self._close_if_idle_locked()
        if closed is not None:
            self._emit(closed)

    def _close_if_idle_locked(self) -> Window | None:
        if self._current is None or self._gate is None or not self.policy.close_when_idle:
            return None
        if not self._gate.try_enter():
            return None
        return self._close_locked("idle", counted=True)

    def _close_locked(self, reason: str, counted: bool = False) -> Window | None:
        w = self._current
        self._current = None
        if w is None:
            return None
        if self._gate is not None and not counted:
            self._gate.enter()
        w.closed_ts = time.time()
        w.reason = reason
        self.windows_closed += 1
        return w

    def _emit(self, window: Window) -> None:
        try:
            self._on_close(window)
        except Exception:  # a broken consumer must not kill intake
            log.exception("window consumer failed for %s", window.window_id)
            if self._gate is not None:
                self._gate.leave()  # it never reached the pipeline

    def _timer_loop(self) -> None:
        while True:
            closed: Window | None = None
            with self._cond:
                if self._stopped:
                    return
                if self._current is None:
                    self._cond.wait(timeout=1.0)
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(timeout=remaining)
                    continue
                closed = self._close_locked("seconds")
            if closed is not None:
                self._emit(closed)
