"""A systemd watchdog tied to pipeline progress, not to the process merely being alive.

``ProgressWatchdog`` pings ``WATCHDOG=1`` at half of ``WATCHDOG_USEC`` while the pipeline is
healthy. Healthy means: no supervised thread is dead (``dead``, from the agent's
:class:`~cdml_edge.supervisor.Supervisor`), and nothing is pending (idle is fine) or a
window completed within the last ``stall_after_s`` seconds. Work pending with no progress for
``stall_after_s`` is a stall; a thread dead and not yet running again is a dead part. Either
way the pings stop, and systemd restarts the service once ``WatchdogSec`` runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cdml_edge.health.notify import SdNotifier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthState:
    """A snapshot of pipeline health (the body of ``/healthz``)."""

    ok: bool
    stalled: bool
    pending: int
    last_progress_age_s: float | None
    """Seconds since the last ``progress()``; None before the first one."""
    stalled_for_s: float
    """How long pending work has waited without progress (0 when nothing is pending)."""
    progress_count: int
    pings_sent: int
    dead_threads: tuple[str, ...] = ()
    """Supervised threads dead now (died, not running again yet)."""
    stalls: int = 0
    """Stalls since the start, the one going on included (``cdml_edge_stalls_total``)."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (JSON-ready)."""
        return asdict(self)


class ProgressWatchdog:
    """Sends ``WATCHDOG=1`` only while the pipeline makes progress.

    The agent calls:

    * ``progress()`` each time a window completes (results published or spooled);
    * ``set_busy(n_pending)`` whenever the amount of pending work changes (items or windows
      queued anywhere in the pipeline); ``0`` means idle.

    Then ``start()`` runs a daemon thread that pings at ``interval_s`` (default: half the
    systemd watchdog interval from ``WATCHDOG_USEC``). Without a systemd watchdog and no
    ``interval_s`` the thread does not run, but ``state()`` still serves ``/healthz``.
    Starting it before the models load is safe: with nothing pending it counts as healthy.
    """

    def __init__(
        self,
        notifier: SdNotifier,
        stall_after_s: float,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        dead: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        if stall_after_s <= 0:
            raise ValueError(f"stall_after_s must be > 0, got {stall_after_s}")
        self._notifier = notifier
        self._stall_after_s = float(stall_after_s)
        if interval_s is None:
            wd = notifier.watchdog_interval()
            interval_s = wd / 2 if wd is not None else None
        if interval_s is not None and interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._interval_s = interval_s
        self._clock = clock
        self._dead = dead
        self._lock = threading.Lock()
        self._pending = 0
        self._last_progress: float | None = None
        self._waiting_since = clock()
        self._progress_count = 0
        self._stalls_ended = 0
        self._pings = 0
        self._was_stalled = False
        self.judge_progress = True  # False: ping while alive (health.watchdog off)
        self._was_dead: tuple[str, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float | None:
        """Seconds between pings, or None when no watchdog is armed."""
        return self._interval_s

    @property
    def stall_after_s(self) -> float:
        """Seconds pending work may wait without progress before it counts as a stall."""
        return self._stall_after_s

    def progress(self) -> None:
        """A window completed: the pipeline is moving."""
        with self._lock:
            now = self._clock()
            self._count_a_stall_ending(now)
            self._last_progress = now
            self._waiting_since = now
            self._progress_count += 1

    def set_busy(self, n_pending: int) -> None:
        """Report how much work is pending (0 = idle). Idle time never counts as a stall."""
        if n_pending < 0:
            raise ValueError(f"n_pending must be >= 0, got {n_pending}")
        with self._lock:
            if self._pending == 0 and n_pending > 0:
                # Work just arrived: the stall clock starts now, not at the last progress.
                self._waiting_since = self._clock()
            elif n_pending == 0:
                self._count_a_stall_ending(self._clock())
            self._pending = n_pending

    def _stalled_at(self, now: float) -> bool:
        return self._pending > 0 and now - self._waiting_since >= self._stall_after_s

    def _count_a_stall_ending(self, now: float) -> None:
        """Progress or an empty pipeline ends the wait: a stall if it lasted (lock held)."""
        if self._stalled_at(now):
            self._stalls_ended += 1

    def state(self) -> HealthState:
        """Current health; cheap, thread-safe."""
        dead = tuple(self._dead()) if self._dead is not None else ()
        with self._lock:
            now = self._clock()
            age = None if self._last_progress is None else now - self._last_progress
            waited = now - self._waiting_since if self._pending > 0 else 0.0
            stalled = self._stalled_at(now)
            return HealthState(
                ok=not stalled and not dead,
                stalled=stalled,
                pending=self._pending,
                last_progress_age_s=age,
                stalled_for_s=waited,
                progress_count=self._progress_count,
                pings_sent=self._pings,
                dead_threads=dead,
                stalls=self._stalls_ended + stalled,
            )

    def healthy(self) -> bool:
        """Not stalled and no supervised thread dead."""
        return self.state().ok

    def tick(self) -> bool:
        """One check: ping when healthy. Returns True when a ping was sent.

        With ``judge_progress`` off (``health.watchdog: false`` in a unit whose
        ``WatchdogSec=`` is armed) every tick pings: the process is alive, which is all such
        a watchdog is then told to judge.
        """
        if not self.judge_progress:
            return self._ping()
        st = self.state()
        if self._report_dead(st.dead_threads):
            return False
        if st.stalled:
            if not self._was_stalled:
                self._was_stalled = True
                msg = f"stalled: {st.pending} pending, no progress for {st.stalled_for_s:.0f} s"
                log.error("watchdog: %s; pings stop", msg)
                self._notifier.status(msg)
            return False
        if self._was_stalled:
            self._was_stalled = False
            log.warning("watchdog: progress resumed; pings restart")
            self._notifier.status("running")
        return self._ping()

    def _ping(self) -> bool:
        sent = self._notifier.watchdog()
        if sent:
            with self._lock:
                self._pings += 1
        return sent

    def _report_dead(self, dead: tuple[str, ...]) -> bool:
        """Whether a supervised thread is dead (no ping); the status line says which."""
        if dead == self._was_dead:
            return bool(dead)
        self._was_dead = dead
        if dead:
            msg = f"dead: {', '.join(dead)}"
            log.error("watchdog: %s; pings stop", msg)
        else:
            msg = "running"
            log.warning("watchdog: every supervised thread runs again; pings restart")
        self._notifier.status(msg)
        return bool(dead)

    def start(self) -> None:
        """Start the ping thread (no-op without an interval or when already running)."""
        if self._interval_s is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cdml-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the ping thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        assert self._interval_s is not None
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self._interval_s)

    def __enter__(self) -> ProgressWatchdog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
