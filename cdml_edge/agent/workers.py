"""The windows in flight: their queue, the worker threads and the count a drain waits for.

The queue holds closed windows, the threads take them, and the count is of the windows not
yet durable.

The workers are supervised parts (``pipeline-<n>``, see :mod:`cdml_edge.supervisor`):
a window whose handling raises is handed to ``on_lost`` (the agent gives its budget back and
puts its files back for a retry) and counted done, then the worker dies and is restarted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from cdml_edge.supervisor import Spawn, Worker, plain_thread
from cdml_edge.window.items import Window

log = logging.getLogger(__name__)

#: how long a drain waits without a window settling before it calls its ``stuck`` hook
DRAIN_SLICE = 0.2

Busy = Callable[[int, int], None]
"""``(windows queued, windows in flight)``: called whenever either changes."""


class WindowWorkers:
    """Hands closed windows to ``workers`` threads; one object for the agent's lifetime.

    A window is in flight from :meth:`put` until :meth:`done` (durable, or given up), which
    may come from another thread (the output's ``on_durable``) after its worker moved on.
    """

    def __init__(
        self,
        busy: Busy,
        progress: Callable[[], None],
        *,
        spawn: Spawn = plain_thread,
        on_lost: Callable[[Window], None] | None = None,
    ) -> None:
        self._busy = busy
        self._progress = progress
        self._spawn = spawn
        self._on_lost = on_lost
        self._idle = threading.Condition()
        self._inflight = 0
        self._queue: queue.Queue[Window | None] = queue.Queue()
        self._threads: list[Worker] = []

    @property
    def inflight(self) -> int:
        """Windows closed and not yet durable."""
        return self._inflight

    def start(self, handle: Callable[[Window], None], workers: int) -> None:
        """Start ``workers`` threads calling ``handle`` on each queued window."""
        q = self._queue
        for i in range(workers):
            t = self._spawn(f"pipeline-{i}", lambda q=q: self._loop(q, handle))  # type: ignore[misc]
            t.start()
            self._threads.append(t)

    def put(self, window: Window) -> None:
        """A window closed (the windowers' emit): queue it, count it in flight."""
        with self._idle:
            self._inflight += 1
        self._queue.put(window)
        self._report()

    def done(self) -> None:
        """A window is durable or given up: no longer in flight; progress for the watchdog."""
        with self._idle:
            self._inflight -= 1
            self._idle.notify_all()
        self._progress()
        self._report()

    def drain(self, timeout: float, stuck: Callable[[int], object] | None = None) -> bool:
        """Wait up to ``timeout`` for the windows in flight, then stop the threads.

        ``True`` if none was left in flight. A thread still busy keeps its queue; the next
        :meth:`start` gets a fresh one. ``stuck``: called (outside the lock) with the number
        of windows in flight each :data:`DRAIN_SLICE` seconds without one settling, once none
        waits in the queue (the agent's gives up the windows a tee holds, when only those
        are left).
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._idle:
                inflight = self._inflight
                left = deadline - time.monotonic()
                if inflight <= 0 or left <= 0:
                    drained = inflight <= 0
                    break
                self._idle.wait(min(left, DRAIN_SLICE))
                unchanged = self._inflight == inflight
            if stuck is not None and unchanged and self._queue.qsize() == 0:
                stuck(inflight)
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        self._threads = []
        self._queue = queue.Queue()
        if not drained:
            log.warning("drain: %d windows still in flight after %.1fs", self._inflight, timeout)
        return drained

    def _report(self) -> None:
        self._busy(self._queue.qsize(), max(0, self._inflight))

    def _loop(self, q: queue.Queue[Window | None], handle: Callable[[Window], None]) -> None:
        while True:
            window = q.get()
            if window is None:
                return
            try:
                handle(window)
            except BaseException:
                self._lost(window)
                raise  # the supervisor counts the death and restarts this worker

    def _lost(self, window: Window) -> None:
        """A window whose handling raised: ``on_lost`` gets it back.

        It is no longer in flight (a drain does not wait for it).
        """
        try:
            if self._on_lost is not None:
                self._on_lost(window)
        except Exception:
            log.exception("could not give back window %s", window.window_id)
        finally:
            self.done()
