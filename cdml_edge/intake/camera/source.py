"""A :class:`CameraSource` takes frames from a camera that may go away and come back.

The frames come from a capture process (:mod:`cdml_edge.intake.camera`): OpenCV runs there,
so a driver or stream that hangs can stall only that process, which is killed. The source's
thread supervises it: a failed open, a failed read, a process that dies, or no frame for
``read_timeout_s`` ends the capture; the source waits (capped exponential backoff) and starts
a new one, forever. :class:`~cdml_edge.intake.camera.status.CameraStatus` turns this
into one state change per outage and one on recovery. Frames arrive JPEG-encoded; those the
budget refuses are skipped and counted (``stats.skipped``), as are those that arrive while
intake is paused (``stats.paused_skipped``). A video file that ends (``loop`` off) ends the
source.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from cdml_edge.backoff import Backoff
from cdml_edge.intake.base import ErrorSink, ItemSink, SourceStats
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera import protocol
from cdml_edge.intake.camera.link import EXITED, CaptureProcess, failure_detail
from cdml_edge.intake.camera.settings import (
    Backend,
    CaptureSettings,
    redact_url,
    repr_redacted,
)
from cdml_edge.intake.camera.status import CameraSnapshot, CameraStatus, CameraTransition
from cdml_edge.window.items import Item
from cdml_edge.window.payloads import item_id

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
"""Longest wait for a new capture process to import OpenCV (a cold SD card is slow)."""
SLACK_S = 2.0
"""Added to the camera's own open / read timeouts before the process is killed: the child
normally reports the timeout itself, this is the guard for when it cannot."""
POLL_S = 0.25
"""Longest the supervising thread waits without looking at ``stop()`` and the grace."""
STABLE_S = 10.0
"""Frames must flow this long in one capture before the reconnect backoff starts over: a
camera that drops after each few frames is retried ever more slowly, up to the cap, instead
of every ``reconnect_first`` (a process start and two state changes each time)."""

TransitionSink = Callable[[CameraTransition], None]

DROP_BUDGET_FULL = "camera_budget_full"
DROP_PAUSED = "camera_paused_skipped"
CAMERA_DROP_REASONS = (DROP_BUDGET_FULL, DROP_PAUSED)
"""The ``cdml_edge_dropped_total`` reasons of camera frames (:meth:`CameraStats.drops`)."""


@dataclass
class CameraStats(SourceStats):
    """A camera source's counters: ``skipped`` are the frames the in-flight budget refused."""

    paused_skipped: int = 0  # frames that arrived while intake was paused (after a failed window)

    def drops(self) -> dict[str, int]:
        """Frames dropped so far, by ``cdml_edge_dropped_total`` reason."""
        return {DROP_BUDGET_FULL: self.skipped, DROP_PAUSED: self.paused_skipped}


@dataclass(frozen=True)
class CameraSpec:
    """A camera source: device index or path, stream URL, GStreamer pipeline or video file."""

    name: str
    url: str  # "0" (device index), "/dev/video0", "rtsp://...", "http://...", a file, a pipeline
    fps: float = 5.0
    jpeg_quality: int = 90
    loop: bool = False  # for video files: start again at the end
    modality: str = "image"
    max_frames: int | None = None
    backend: Backend = "auto"
    rtsp_transport: Literal["tcp", "udp"] = "tcp"
    open_timeout_s: float = 10.0
    read_timeout_s: float = 5.0
    reconnect_first_s: float = 0.5
    reconnect_max_s: float = 30.0
    unhealthy_after_s: float = 60.0

    def __repr__(self) -> str:  # the password stays out of logs, asserts, crash reports
        return repr_redacted(self)

    def capture_settings(self) -> CaptureSettings:
        """What the capture process is told: the fields this spec shares with it."""
        return CaptureSettings(**{f.name: getattr(self, f.name) for f in fields(CaptureSettings)})


@dataclass(frozen=True)
class _Outcome:
    """How one capture process ended: ``reason`` is None when the video file ended."""

    reason: str | None


class CameraSource:
    """Frames of one camera, JPEG-encoded in memory (nothing touches the disk).

    Survives its camera (see the module docstring). ``on_change`` gets every state change.
    """

    def __init__(
        self,
        spec: CameraSpec,
        budget: ByteBudget,
        sink: ItemSink,
        on_error: ErrorSink,
        on_change: TransitionSink | None = None,
    ) -> None:
        self.spec = spec
        self.url = redact_url(spec.url)
        self.stats = CameraStats()
        self._on_change = on_change
        self.status = CameraStatus(spec.name, self.url, spec.unhealthy_after_s, self._changed)
        self._budget = budget
        self._sink = sink
        self._on_error = on_error  # frames are never bad inputs: kept for the source contract
        self._stopped = threading.Event()
        self._paused = False
        self._emitted = 0
        self._backoff = Backoff(spec.reconnect_first_s, spec.reconnect_max_s, jitter="spread")
        self._thread = threading.Thread(target=self._loop, name=f"cam-{spec.name}", daemon=True)
        self.finished = threading.Event()  # set when a video file ran out (loop off) or stopped

    def start(self) -> None:
        """Start capturing on the source's thread."""
        self.status.begin()
        self._thread.start()

    def stop(self) -> None:
        """Stop capturing; waits up to 10 s for the source's thread."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)

    def pause(self, paused: bool) -> None:
        """Skip (or keep again) the frames captured; counted in ``stats.paused_skipped``."""
        self._paused = paused

    def retry(self, path: Path, delay: float) -> None:  # frames have no file to retake
        """Nothing to do: a frame cannot be taken again."""
        pass

    def release(self, path: Path, keep: bool) -> None:  # frames have no file
        """Nothing to do: a frame has no file to finish."""
        return None

    def hold(self, path: Path) -> None:  # frames have no file
        """Nothing to do: a frame has no file to hold."""
        return None

    @property
    def pending_count(self) -> int:
        """Always 0: frames never wait on disk."""
        return 0

    def health(self) -> CameraSnapshot:
        """The camera's state and counters now."""
        return self.status.snapshot()

    # -- supervision -------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    outcome = self._capture_once()
                except Exception as exc:  # a bug here must not end the camera for good
                    log.exception("camera %s: capture failed", self.spec.name)
                    outcome = _Outcome(f"internal error: {type(exc).__name__}: {exc}")
                if self._stopped.is_set():
                    break
                if outcome.reason is None:
                    self.status.finish("ended")
                    return
                self.stats.errors += 1
                log.debug("camera %s (%s): %s", self.spec.name, self.url, outcome.reason)
                self.status.lost(outcome.reason)
                self._wait(self._backoff.next())
            self.status.finish("stopped")
        finally:
            self.finished.set()

    def _changed(self, change: CameraTransition) -> None:
        """Log a state change and pass it on; a failing receiver never stops the camera."""
        log.log(
            logging.INFO if change.state in ("streaming", "stopped") else logging.WARNING,
            "camera %s (%s): %s -> %s%s",
            change.source,
            self.url,
            change.previous,
            change.state,
            f" ({change.reason})" if change.reason else "",
        )
        if self._on_change is None:
            return
        try:
            self._on_change(change)
        except Exception:
            log.exception("camera %s: reporting the state change failed", change.source)

    def _wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self._stopped.is_set():
            self.status.check_grace()
            self._stopped.wait(min(left, POLL_S))

    def _capture_once(self) -> _Outcome:
        """Run one capture process until it fails, stalls, ends, or ``stop()``."""
        try:
            proc = CaptureProcess(self.spec.capture_settings())
        except OSError as exc:
            return _Outcome(f"cannot start the capture process: {exc}")
        try:
            return self._pump(proc)
        except protocol.ProtocolError as exc:
            return _Outcome(f"capture process: {exc}")
        finally:
            proc.close()

    def _pump(self, proc: CaptureProcess) -> _Outcome:
        """Read messages until the capture ends.

        Each phase (start, open, read) has its deadline, and any message from the child
        restarts it.
        """
        spec = self.spec
        phase, limit = "start", START_TIMEOUT_S
        deadline = time.monotonic() + limit
        first_frame: float | None = None
        while not self._stopped.is_set():
            self.status.check_grace()
            msg = proc.next_message(min(POLL_S, max(0.0, deadline - time.monotonic())))
            if msg is None:
                if time.monotonic() < deadline:
                    continue
                what = {"start": "did not start", "open": "open did not finish"}.get(
                    phase, "no frame"
                )
                return _Outcome(f"{what} within {limit:g} s (stalled; capture process killed)")
            if msg.kind == protocol.STARTED:
                phase, limit = "open", spec.open_timeout_s + SLACK_S
            elif msg.kind == protocol.OPENED:
                phase, limit = "read", spec.read_timeout_s + SLACK_S
                log.info("camera %s (%s) opened: %s", spec.name, self.url, msg.payload.decode())
            elif msg.kind == protocol.FRAME:
                first_frame = first_frame or time.monotonic()
                if time.monotonic() - first_frame >= STABLE_S:
                    self._backoff.reset()
                self.status.frame()
                self._emit(msg.payload, msg.ts_ns)
                if spec.max_frames is not None and self._emitted >= spec.max_frames:
                    return _Outcome(None)
            elif msg.kind == protocol.LAG:
                self._lagged(msg.payload)
            elif msg.kind == protocol.ENDED:
                return _Outcome(None)
            elif msg.kind == protocol.FAILED:
                return _Outcome(_with_detail(msg.payload.decode("utf-8", "replace"), proc))
            elif msg.kind == EXITED:
                return _Outcome(
                    _with_detail(f"capture process exited ({msg.payload.decode()})", proc)
                )
            deadline = time.monotonic() + limit  # any message shows the capture is alive
        return _Outcome("stopped")

    def _lagged(self, payload: bytes) -> None:
        """The capture's lag behind the stream's clock: recorded; logged when it falls behind."""
        try:
            seconds = float(json.loads(payload)["lag_s"])
        except (ValueError, KeyError, TypeError) as exc:
            raise protocol.ProtocolError(f"bad lag message {payload[:80]!r}: {exc}") from exc
        change = self.status.lag(seconds)
        if change == "behind":
            log.warning(
                "camera %s (%s): grabs run %.1f s behind the stream (decoding slower than the "
                "camera sends, or the network delivers late): frames are that much older than "
                "their timestamps",
                self.spec.name,
                self.url,
                seconds,
            )
        elif change == "caught up":
            log.info("camera %s (%s): grabs caught up with the stream", self.spec.name, self.url)

    # -- frames ------------------------------------------------------------------------------
    def _emit(self, data: bytes, ts_ns: int) -> None:
        if self._paused:
            self.stats.paused_skipped += 1
            return
        charge = self._budget.cost(len(data), self.spec.modality)
        if not self._budget.try_acquire(charge):
            self.stats.skipped += 1
            return
        name = f"frame-{ts_ns}.jpg"
        self._emitted += 1
        self.stats.taken += 1
        self.stats.taken_bytes += len(data)
        self._sink(
            Item(
                source=self.spec.name,
                name=name,
                modality=self.spec.modality,
                ts=ts_ns / 1e9,
                data=data,
                item_id=item_id(self.spec.name, name, len(data), ts_ns),
                size=len(data),
                mtime_ns=ts_ns,
                charge=charge,
            )
        )


def _with_detail(reason: str, proc: CaptureProcess) -> str:
    """``reason``, then the last line the capture process wrote to stderr (FFmpeg's own)."""
    proc.drain_stderr()
    detail = failure_detail(proc.stderr_tail())
    return f"{reason}: {detail}" if detail and detail not in reason else reason
