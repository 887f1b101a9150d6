"""What a camera is doing (streaming, reconnecting, failed, ...) and how long it has been down.

:class:`CameraStatus` is the one place a camera source records frames and failures; it turns
them into state changes (one :class:`CameraTransition` per change, never one per retry) and
answers :meth:`CameraStatus.snapshot` for health. :class:`~cdml_edge.backoff.Backoff` spaces
the retries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from cdml_edge.intake.camera.lag import BEHIND_S
from cdml_edge.window.payloads import CameraStateName as CameraState

CAMERA_STATES: tuple[CameraState, ...] = get_args(CameraState)
DOWN_STATES = frozenset({"connecting", "reconnecting", "failed"})
"""States in which the camera gives no frames although it should."""


@dataclass(frozen=True)
class CameraTransition:
    """One state change of a camera, as reported on ``{source}/camera``."""

    source: str
    state: CameraState
    previous: CameraState
    reason: str | None
    """Why the camera went down (or, on recovery, what the outage was)."""
    down_for_s: float | None
    """How long frames had stopped: on a way down since the last frame, on recovery the
    whole outage; ``None`` while streaming."""
    outages: int
    reconnects: int
    failed_attempts: int
    url: str
    ts: float


@dataclass(frozen=True)
class CameraSnapshot:
    """A camera's health right now (one entry of the health payload's ``cameras``)."""

    state: CameraState
    url: str
    since: float
    """Unix time the camera entered ``state``."""
    frames: int
    """Frames received from the camera (taken or skipped)."""
    last_frame_age_s: float | None
    down_for_s: float | None
    outages: int
    reconnects: int
    failed_attempts: int
    last_error: str | None
    unhealthy: bool
    """Down for longer than the camera's ``unhealthy_after`` (what ``/healthz`` judges)."""
    lag_s: float | None = None
    """How far the grabs run behind the stream's own clock (:mod:`~.lag`), last reported by
    this capture; ``None`` without a stream clock or before the first report."""
    fell_behind: int = 0
    """Times the lag reached :data:`~.lag.BEHIND_S` (once per episode)."""


class CameraStatus:
    """Thread-safe state of one camera; ``on_change`` gets every :class:`CameraTransition`.

    Frames and failures come from the capture thread; :meth:`check_grace` (called by that
    thread while it waits) turns a long outage into ``failed``; :meth:`snapshot` may be
    called from any thread.
    """

    def __init__(
        self,
        source: str,
        url: str,
        unhealthy_after_s: float,
        on_change: Callable[[CameraTransition], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.url, self.unhealthy_after_s = source, url, unhealthy_after_s
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._state: CameraState = "connecting"
        self._since = clock()
        self._since_unix = time.time()
        self._down_since: float | None = self._since
        self._last_frame: float | None = None
        self._frames = self._outages = self._reconnects = self._failed = 0
        self._last_error: str | None = None
        self._outage_reason: str | None = None  # why the current outage began
        self._lag: float | None = None
        self._behind = False
        self._fell_behind = 0

    @property
    def state(self) -> CameraState:
        """The camera's state now."""
        return self._state

    def begin(self) -> None:
        """The source starts now: the time to the first frame counts from here."""
        with self._lock:
            self._since, self._since_unix = self._clock(), time.time()
            self._down_since = self._since

    def frame(self) -> None:
        """A frame arrived: the camera streams (a recovery when it was down)."""
        with self._lock:
            now = self._clock()
            self._frames += 1
            self._last_frame = now
            if self._state == "streaming":
                return
            outage = None if self._down_since is None else now - self._down_since
            if self._state in ("reconnecting", "failed"):
                self._reconnects += 1
            reason = self._outage_reason
            self._down_since = self._outage_reason = None
            change = self._move("streaming", reason, outage)
        self._notify(change)

    def lag(self, seconds: float) -> Literal["behind", "caught up"] | None:
        """The capture reported its lag; what changed.

        ``behind`` when it reached :data:`BEHIND_S`, ``caught up`` when it fell under half of
        that again, else ``None``.
        """
        with self._lock:
            self._lag = seconds
            if not self._behind and seconds >= BEHIND_S:
                self._behind = True
                self._fell_behind += 1
                return "behind"
            if self._behind and seconds < BEHIND_S / 2:
                self._behind = False
                return "caught up"
            return None

    def lost(self, reason: str) -> None:
        """An open or read failed: the first failure of an outage changes the state."""
        with self._lock:
            self._lag, self._behind = None, False  # the backlog went with the capture
            self._failed += 1
            self._last_error = reason
            if self._state not in ("connecting", "streaming"):
                return
            now = self._clock()
            if self._state == "streaming":
                self._down_since = self._last_frame if self._last_frame is not None else now
            self._outages += 1
            self._outage_reason = reason
            change = self._move("reconnecting", reason, now - (self._down_since or now))
        self._notify(change)

    def check_grace(self) -> None:
        """Down for longer than ``unhealthy_after``: ``failed`` (retries go on)."""
        with self._lock:
            if self._state not in ("connecting", "reconnecting") or self._down_since is None:
                return
            down = self._clock() - self._down_since
            if down < self.unhealthy_after_s:
                return
            if self._state == "connecting":
                self._outages += 1
                self._outage_reason = self._last_error
            change = self._move("failed", self._last_error, down)
        self._notify(change)

    def finish(self, state: Literal["ended", "stopped"]) -> None:
        """The capture is over: the video file ``ended`` or the source ``stopped``."""
        with self._lock:
            if self._state == state:
                return
            self._down_since = None
            change = self._move(state, None, None)
        self._notify(change)

    def snapshot(self) -> CameraSnapshot:
        """The state and counters now, for the health payload."""
        with self._lock:
            now = self._clock()
            down = None if self._down_since is None else now - self._down_since
            return CameraSnapshot(
                state=self._state,
                url=self.url,
                since=self._since_unix,
                frames=self._frames,
                last_frame_age_s=None if self._last_frame is None else now - self._last_frame,
                down_for_s=down,
                outages=self._outages,
                reconnects=self._reconnects,
                failed_attempts=self._failed,
                last_error=self._last_error,
                unhealthy=down is not None and down >= self.unhealthy_after_s,
                lag_s=self._lag,
                fell_behind=self._fell_behind,
            )

    def _move(
        self, state: CameraState, reason: str | None, down_for: float | None
    ) -> CameraTransition:
        previous, self._state = self._state, state
        self._since, self._since_unix = self._clock(), time.time()
        return CameraTransition(
            source=self.source,
            state=state,
            previous=previous,
            reason=reason,
            down_for_s=down_for,
            outages=self._outages,
            reconnects=self._reconnects,
            failed_attempts=self._failed,
            url=self.url,
            ts=self._since_unix,
        )

    def _notify(self, change: CameraTransition) -> None:
        if self._on_change is not None:
            self._on_change(change)
