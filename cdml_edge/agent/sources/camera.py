"""A :class:`CameraSource` grabs frames from ``cv2.VideoCapture`` (device index, RTSP/HTTP URL
or a video file) at a fixed rate and JPEG-encodes them in memory; frames that the budget
refuses are skipped and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdml_edge.agent.sources.base import ErrorSink, ItemSink, SourceError, SourceStats
from cdml_edge.agent.windows import ByteBudget
from cdml_edge.window.items import Item
from cdml_edge.window.payloads import item_id

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class CameraSpec:
    """A camera source: device index, URL or video file, sampled at ``fps``."""

    name: str
    url: str  # "0" (device index), "rtsp://...", "http://...", or a video file path
    fps: float = 5.0
    jpeg_quality: int = 90
    loop: bool = False  # for video files: start again at the end
    modality: str = "image"
    max_frames: int | None = None


@dataclass
class _CamState:
    frames: int = 0
    read_failures: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class CameraSource:
    """Grabs frames at ``fps`` and JPEG-encodes them in memory (nothing touches the disk)."""

    def __init__(
        self, spec: CameraSpec, budget: ByteBudget, sink: ItemSink, on_error: ErrorSink
    ) -> None:
        self.spec = spec
        self.stats = SourceStats()
        self._budget = budget
        self._sink = sink
        self._on_error = on_error
        self._stopped = threading.Event()
        self._paused = False
        self._state = _CamState()
        self._thread = threading.Thread(target=self._loop, name=f"cam-{spec.name}", daemon=True)
        self.finished = threading.Event()  # set when a video file ran out (and loop is off)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)

    def pause(self, paused: bool) -> None:
        self._paused = paused

    def retry(self, path: Path, delay: float) -> None:  # frames have no file to retake
        pass

    def release(self, path: Path, keep: bool) -> None:  # frames have no file
        return None

    @property
    def pending_count(self) -> int:
        return 0

    def _open(self) -> Any:
        import cv2

        target: int | str = int(self.spec.url) if self.spec.url.isdigit() else self.spec.url
        cap = cv2.VideoCapture(target)
        if not cap.isOpened():
            raise SourceError(self.spec.url, "camera / stream / video file cannot be opened")
        return cap

    def _loop(self) -> None:
        import cv2

        try:
            cap = self._open()
        except SourceError as exc:
            self.stats.errors += 1
            self._on_error(self.spec.name, None, exc, None)
            self.finished.set()
            return
        period = 1.0 / self.spec.fps if self.spec.fps > 0 else 0.0
        next_t = time.monotonic()
        params = [int(cv2.IMWRITE_JPEG_QUALITY), int(self.spec.jpeg_quality)]
        try:
            while not self._stopped.is_set():
                if self.spec.max_frames is not None and self._state.frames >= self.spec.max_frames:
                    break
                ok, frame = cap.read()
                if not ok:
                    if self.spec.loop and cap.set(cv2.CAP_PROP_POS_FRAMES, 0):
                        ok, frame = cap.read()
                    if not ok:
                        break
                ts_ns = time.time_ns()
                self._state.frames += 1
                if self._paused:
                    self.stats.skipped += 1
                else:
                    self._emit_frame(cv2, frame, params, ts_ns)
                next_t += period
                delay = next_t - time.monotonic()
                if delay > 0:
                    self._stopped.wait(delay)
                else:
                    next_t = time.monotonic()  # fell behind: do not burst to catch up
        finally:
            cap.release()
            self.finished.set()

    def _emit_frame(self, cv2: Any, frame: Any, params: list[int], ts_ns: int) -> None:
        # estimate before encoding so an over-budget frame costs no encode
        estimate = self._budget.cost(max(1024, int(frame.nbytes // 10)), self.spec.modality)
        if not self._budget.try_acquire(estimate):
            self.stats.skipped += 1
            return
        ok, buf = cv2.imencode(".jpg", frame, params)
        self._budget.release(estimate)
        if not ok:
            self.stats.errors += 1
            return
        data = buf.tobytes()
        charge = self._budget.cost(len(data), self.spec.modality)
        if not self._budget.try_acquire(charge):
            self.stats.skipped += 1
            return
        name = f"frame-{ts_ns}.jpg"
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
