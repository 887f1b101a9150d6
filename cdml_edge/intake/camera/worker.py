"""The capture process: open one camera, sample frames at ``fps``, write JPEGs to stdout.

Run as ``python -m cdml_edge.intake.camera.worker`` by :class:`~.link.CaptureProcess`, with
the JSON of a :class:`~.settings.CaptureSettings` as the first line of its stdin. It writes
:mod:`~.protocol` messages and exits on the first failure (the agent decides what happens
next): cannot open, no frame within the read timeout, the stream ended. It dies with the
agent (``PR_SET_PDEATHSIG`` on Linux; elsewhere its next write fails).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from typing import Any, BinaryIO

from cdml_edge.intake.camera import lag, protocol
from cdml_edge.intake.camera.settings import CaptureSettings, Target, ffmpeg_options, resolve_target

HEARTBEAT_S = 0.5
"""Longest silence of a healthy capture: a heartbeat when no frame was due."""


class CaptureFailed(Exception):
    """The camera cannot be opened or stopped delivering frames."""


class _Writer:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.last = time.monotonic()

    def send(self, kind: bytes, payload: bytes = b"", ts_ns: int = 0) -> None:
        self._out.write(protocol.encode(kind, payload, ts_ns))
        self._out.flush()
        self.last = time.monotonic()

    def heartbeat_due(self) -> bool:
        return time.monotonic() - self.last >= HEARTBEAT_S


def open_capture(cv2: Any, target: Target, settings: CaptureSettings) -> Any:
    """An opened ``cv2.VideoCapture`` for ``target``; :class:`CaptureFailed` when it is not."""
    if target.api == "gstreamer" and "GStreamer:                   YES" not in (
        cv2.getBuildInformation()
    ):
        raise CaptureFailed("this OpenCV build has no GStreamer backend (see the docs: cameras)")
    api = {"ffmpeg": cv2.CAP_FFMPEG, "v4l2": cv2.CAP_V4L2, "gstreamer": cv2.CAP_GSTREAMER}
    if target.api == "ffmpeg":  # FFmpeg honours both timeouts (interrupt callback)
        params = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
            int(settings.open_timeout_s * 1000),
            cv2.CAP_PROP_READ_TIMEOUT_MSEC,
            int(settings.read_timeout_s * 1000),
        ]
        started = time.monotonic()
        cap = cv2.VideoCapture(target.source, api["ffmpeg"], params)
        if not cap.isOpened() and time.monotonic() - started >= 0.9 * settings.open_timeout_s:
            raise CaptureFailed(  # it connected (or is trying to) and heard nothing back
                f"no answer within {settings.open_timeout_s:g} s (open timed out)"
            )
    else:
        cap = cv2.VideoCapture(target.source, api[target.api])
    if not cap.isOpened():
        raise CaptureFailed(f"cannot open with {target.api} (absent, refused or unreadable)")
    return cap


def _encode(cv2: Any, frame: Any, quality: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", frame, [int(cv2.IMWRITE_JPEG_QUALITY), quality])
    if not ok:
        raise CaptureFailed("JPEG encoding failed")
    return bytes(buf.tobytes())


def stream_live(cv2: Any, cap: Any, settings: CaptureSettings, out: _Writer) -> None:
    """Grab every frame the camera sends, keep one per ``1/fps``.

    Grabbing them all keeps the camera's buffer from filling with stale frames; how far the
    grabs run behind the stream's clock is reported (:mod:`~.lag`, RTSP only). Raises
    :class:`CaptureFailed` when a grab fails or times out.
    """
    period = 1.0 / settings.fps
    next_t = next_lag = time.monotonic()
    grabbed = 0
    meter = lag.LagMeter() if lag.has_stream_clock(settings.url) else None
    while True:
        if not cap.grab():
            raise CaptureFailed(
                f"no frame within {settings.read_timeout_s:g} s (stream ended or stalled)"
            )
        ts_ns = time.time_ns()
        grabbed += 1
        now = time.monotonic()
        behind = None
        if meter is not None:
            behind = meter.add(now, float(cap.get(cv2.CAP_PROP_POS_MSEC) or 0.0))
        if behind is not None and now >= next_lag:
            out.send(
                protocol.LAG, json.dumps({"lag_s": round(behind, 3), "grabbed": grabbed}).encode()
            )
            next_lag = now + lag.REPORT_S
        if now >= next_t:
            ok, frame = cap.retrieve()
            if not ok:
                raise CaptureFailed("a grabbed frame could not be decoded")
            out.send(protocol.FRAME, _encode(cv2, frame, settings.jpeg_quality), ts_ns)
            next_t = max(next_t + period, now)  # behind: no burst to catch up
        elif out.heartbeat_due():
            out.send(protocol.HEARTBEAT, json.dumps({"grabbed": grabbed}).encode())


def play_file(cv2: Any, cap: Any, settings: CaptureSettings, out: _Writer) -> None:
    """Read one frame per ``1/fps`` from a video file until it ends (again, with ``loop``)."""
    period = 1.0 / settings.fps
    next_t = time.monotonic()
    while True:
        ok, frame = cap.read()
        if not ok and settings.loop and cap.set(cv2.CAP_PROP_POS_FRAMES, 0):
            ok, frame = cap.read()
        if not ok:
            out.send(protocol.ENDED)
            return
        out.send(protocol.FRAME, _encode(cv2, frame, settings.jpeg_quality), time.time_ns())
        next_t += period
        while (delay := next_t - time.monotonic()) > 0:
            time.sleep(min(delay, HEARTBEAT_S))
            if out.heartbeat_due():
                out.send(protocol.HEARTBEAT, b"{}")
        next_t = max(next_t, time.monotonic() - period)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _claim_stdout() -> BinaryIO:
    """The frame pipe, for the protocol alone; file descriptor 1 then goes to stderr.

    OpenCV writes its INFO and DEBUG log (``OPENCV_LOG_LEVEL``, ``OPENCV_FFMPEG_DEBUG``) and
    C libraries their ``printf`` to descriptor 1: in the frame pipe, that corrupted the
    protocol and no capture ever streamed.
    """
    pipe = os.dup(1)  # not inheritable: no grandchild holds the pipe open
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(pipe, "wb")


def run(settings: CaptureSettings, out: _Writer) -> int:
    """Open and capture until the first failure; the exit status (0: the file ended)."""
    options = ffmpeg_options(settings)
    if options:
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = options
    import cv2

    out.send(protocol.STARTED)
    target = resolve_target(settings)
    try:
        cap = open_capture(cv2, target, settings)
        try:
            info = {
                "width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
                "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
                "fps": float(cap.get(cv2.CAP_PROP_FPS) or 0.0),
                "backend": target.api,
                "mode": target.mode,
            }
            out.send(protocol.OPENED, json.dumps(info).encode())
            (play_file if target.mode == "file" else stream_live)(cv2, cap, settings, out)
        finally:
            cap.release()
    except CaptureFailed as exc:
        out.send(protocol.FAILED, str(exc).encode())
        return 1
    return 0


def main() -> int:
    """Capture with the settings on stdin's first line; the exit status."""
    _die_with_parent()
    pipe = _claim_stdout()
    settings = CaptureSettings.from_json(sys.stdin.readline())
    try:
        return run(settings, _Writer(pipe))
    except BrokenPipeError:  # the agent closed its end: nothing left to do
        return 0


if __name__ == "__main__":
    sys.exit(main())
