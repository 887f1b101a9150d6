"""Real camera-like servers for the camera tests, started and stopped by the tests.

* :class:`RtspServer`: GStreamer's RTSP server in a subprocess (``tests/helpers/rtsp_server.py``,
  run by a Python that has python3-gi and gst-rtsp-server; ``.ci/run`` installs them);
* :class:`MjpegServer`: MJPEG over HTTP (``multipart/x-mixed-replace``) in a thread, whose
  first connection can stall mid-stream;
* :class:`FifoCamera`: a FIFO at a path, fed an MJPEG stream (multipart JPEG parts) by a
  writer thread: the stand-in for a device node that appears when a camera is plugged in.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.ports import restartable_port

HERE = Path(__file__).resolve().parent
PROBE = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0'); "
    "from gi.repository import Gst, GstRtspServer; Gst.init(None); "
    "assert all(Gst.ElementFactory.find(e) for e in "
    "('videotestsrc', 'jpegenc', 'rtpjpegpay'))"
)


def rtsp_python() -> str:
    """A Python that can run the RTSP server, or a skip naming what to install."""
    for candidate in ("/usr/bin/python3", shutil.which("python3") or ""):
        if (
            candidate
            and subprocess.run([candidate, "-c", PROBE], capture_output=True, timeout=60).returncode
            == 0
        ):
            return candidate
    pytest.skip(
        "no RTSP server: install python3-gi gir1.2-gst-rtsp-server-1.0 "
        "gstreamer1.0-plugins-base gstreamer1.0-plugins-good (.ci/run does, as root)"
    )


def jpeg_frame(value: int, size: tuple[int, int] = (64, 48)) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".jpg", np.full((size[1], size[0], 3), value % 256, np.uint8))
    assert ok
    return bytes(buf.tobytes())


def mjpeg_part(data: bytes) -> bytes:
    """One JPEG as a part of a ``multipart/x-mixed-replace`` stream (boundary ``frame``)."""
    head = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data + b"\r\n"


class RtspServer:
    """``rtsp://127.0.0.1:{port}/cam``; :meth:`stop` kills it, :meth:`start` brings it back."""

    def __init__(self, port: int | None = None) -> None:
        self.python = rtsp_python()
        self.port = port or restartable_port()
        self.url = f"rtsp://127.0.0.1:{self.port}/cam"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while True:  # the port may linger a moment after a stop
            self._proc = subprocess.Popen(
                [self.python, str(HERE / "rtsp_server.py"), str(self.port)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert self._proc.stdout is not None
            if self._proc.stdout.readline().strip() == b"ready":
                return
            self._proc.wait()
            if time.monotonic() > end:
                raise RuntimeError(f"RTSP server did not start on port {self.port}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> RtspServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MjpegServer:
    """``http://127.0.0.1:{port}/video.mjpg`` at ``fps``.

    Connection 1 stalls (stops sending, keeps the socket open) after ``stall_after`` frames
    when that is set.
    """

    def __init__(self, fps: float = 20.0, stall_after: int | None = None) -> None:
        self.fps, self.stall_after = fps, stall_after
        self.connections = 0
        self.frames_sent = 0
        self._release = threading.Event()
        self._closing = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.connections += 1
                server._serve(self, server.connections)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/video.mjpg"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _serve(self, h: http.server.BaseHTTPRequestHandler, connection: int) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        h.end_headers()
        n = 0
        try:
            while not self._closing.is_set():
                h.wfile.write(mjpeg_part(jpeg_frame(n * 10)))
                h.wfile.flush()
                n += 1
                self.frames_sent += 1
                if connection == 1 and n == self.stall_after:
                    self._release.wait(60)  # stalled: the socket stays open, nothing comes
                    return
                time.sleep(1.0 / self.fps)
        except OSError:  # the client went away
            return

    def __enter__(self) -> MjpegServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()


class FifoCamera:
    """A FIFO at ``path`` written by :meth:`plug` until :meth:`unplug` removes it.

    :meth:`plug` writes MJPEG parts at ``fps``.
    """

    def __init__(self, path: Path, fps: float = 20.0) -> None:
        self.path, self.fps = path, fps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_written = 0

    def plug(self) -> None:
        os.mkfifo(self.path)
        self._stop.clear()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def unplug(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        n = 0
        while not self._stop.is_set():  # like a device node: serves reader after reader
            fd = self._open_for_a_reader()
            if fd < 0:
                return
            os.set_blocking(fd, True)
            try:
                while not self._stop.is_set():
                    data = memoryview(mjpeg_part(jpeg_frame(n * 10)))
                    while data:
                        data = data[os.write(fd, data) :]
                    n += 1
                    self.frames_written += 1
                    time.sleep(1.0 / self.fps)
            except OSError:  # the reader went away: wait for the next one
                pass
            finally:
                os.close(fd)

    def _open_for_a_reader(self) -> int:
        while not self._stop.is_set():
            try:
                return os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: nobody reads yet
                time.sleep(0.05)
        return -1
