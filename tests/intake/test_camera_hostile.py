"""Cameras as a factory breaks them: verbose OpenCV logging, secrets in the URL and its output.

* ``OPENCV_LOG_LEVEL=INFO`` (or ``DEBUG``, ``OPENCV_FFMPEG_DEBUG=1``), set by an operator
  chasing a camera problem, makes OpenCV print to the capture process's stdout, which is the
  frame pipe: before, every capture ended in a protocol error and no camera ever streamed;
* credentials the URL carries elsewhere than ``user:password@`` (a user name holding ``@``,
  ``?pwd=`` in the query string of a cheap HTTP camera, a password holding a space) were
  shown whole in the logs, the retained ``{source}/camera`` events and the health;
* what the capture process writes to its stderr (kept to explain a failure, and published as
  its reason) is cleaned of the URL's secrets.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import socket
import subprocess
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.agent_runs import wait_for
from helpers.camera_servers import HERE as HELPERS
from helpers.camera_servers import RtspServer, jpeg_frame, mjpeg_part, rtsp_python

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera import source as camera_source
from cdml_edge.intake.camera.link import EXITED, CaptureProcess
from cdml_edge.intake.camera.settings import CaptureSettings, ffmpeg_options, redact_url
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.intake.camera.status import CameraTransition
from cdml_edge.window.items import Item

SECRET = "Zq7SECRETpw"


class _Seen:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.changes: list[CameraTransition] = []
        self._lock = threading.Lock()

    def item(self, item: Item) -> None:
        with self._lock:
            self.items.append(item)

    def change(self, change: CameraTransition) -> None:
        with self._lock:
            self.changes.append(change)

    def count(self) -> int:
        with self._lock:
            return len(self.items)


@pytest.mark.slow  # a real RTSP server and capture processes
@pytest.mark.parametrize(
    ("variable", "value"), [("OPENCV_LOG_LEVEL", "INFO"), ("OPENCV_FFMPEG_DEBUG", "1")]
)
def test_verbose_opencv_logging_does_not_break_the_camera(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenCV's INFO / DEBUG lines go to stdout: they must not land in the frame pipe."""
    monkeypatch.setenv(variable, value)
    if variable != "OPENCV_LOG_LEVEL":
        monkeypatch.setenv("OPENCV_LOG_LEVEL", "DEBUG")
    caplog.set_level(logging.DEBUG, logger="cdml_edge")
    seen = _Seen()
    with RtspServer() as server:
        url = server.url.replace("rtsp://", f"rtsp://viewer:{SECRET}@")
        spec = CameraSpec("gate", url, fps=5.0, open_timeout_s=5.0, read_timeout_s=3.0)
        cam = CameraSource(spec, ByteBudget(10**9), seen.item, lambda *a: None, seen.change)
        cam.start()
        try:
            wait_for(lambda: seen.count() >= 3, 30, f"frames with {variable}={value}")
            health = cam.health()
        finally:
            cam.stop()
    assert health.failed_attempts == 0, health.last_error
    assert [c.state for c in seen.changes] == ["streaming", "stopped"]
    for text in (caplog.text, repr(health), *(repr(c) for c in seen.changes)):
        assert SECRET not in text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # FFmpeg takes the user information up to the last "@": the user name may hold one
        (
            f"rtsp://ops@plant.example:{SECRET}@10.0.0.5:554/x",
            "rtsp://ops@plant.example:***@10.0.0.5:554/x",
        ),
        # cheap HTTP cameras (Foscam and alike) take the password in the query string
        (
            f"http://10.0.0.5/videostream.cgi?user=admin&pwd={SECRET}",
            "http://10.0.0.5/videostream.cgi?user=admin&pwd=***",
        ),
        (
            f"http://10.0.0.5/video.mjpg?username=admin&password={SECRET}&res=1",
            "http://10.0.0.5/video.mjpg?username=admin&password=***&res=1",
        ),
        (
            f"rtsp://10.0.0.5:554/live?channel=1&access_token={SECRET}#x",
            "rtsp://10.0.0.5:554/live?channel=1&access_token=***#x",
        ),
        # a ${CAM_PASSWORD} holding a space
        (f"rtsp://viewer:{SECRET[:4]} {SECRET[4:]}@cam/s1", "rtsp://viewer:***@cam/s1"),
        # unchanged: nothing secret
        ("http://cam/video.mjpg?user=admin&res=hd", "http://cam/video.mjpg?user=admin&res=hd"),
        ("rtsp://cam/path@tag", "rtsp://cam/path@tag"),
    ],
)
def test_secrets_anywhere_in_the_url_are_hidden(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(url) and SECRET[4:] not in redact_url(url)


def test_the_capture_process_stderr_is_cleaned_of_the_url_secrets(tmp_path: Path) -> None:
    """A crash whose last words hold the URL (OpenCV's debug log names the file it opens)."""
    exe = tmp_path / "child"
    url = f"rtsp://viewer:{SECRET}@cam.example/s1?token={SECRET}x"
    exe.write_text(
        "#!/bin/sh\nread line\n"
        f"echo \"VIDEOIO(FFMPEG): trying capture filename='{url}'\" >&2\n"
        f'echo "open {url}: refused" >&2\n'
        f"echo \"password {SECRET} and 'viewer:{SECRET}'\" >&2\nexit 3\n"
    )
    exe.chmod(0o755)
    proc = CaptureProcess(CaptureSettings(url=url), python=str(exe))
    try:
        msg = proc.next_message(10.0)
        assert msg is not None and msg.kind == EXITED
        tail = proc.stderr_tail()
    finally:
        proc.close()
    assert len(tail) == 3
    for line in tail:
        assert SECRET not in line, line
    assert "cam.example" in tail[1] and "***" in tail[1]


class _OneFrameCamera:
    """MJPEG over HTTP that sends a burst of frames per connection, then hangs up: it flaps.

    (A camera whose stream breaks after its first key frame, an overloaded encoder, a link
    that drops.) Records when each connection came.
    """

    def __init__(self, burst: int = 10) -> None:
        self.arrivals: list[float] = []
        self.burst = burst
        cam = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                cam.arrivals.append(time.monotonic())
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                with contextlib.suppress(OSError):
                    for n in range(cam.burst):  # FFmpeg probes the first few
                        self.wfile.write(mjpeg_part(jpeg_frame(n * 20)))
                        self.wfile.flush()
                        time.sleep(0.05)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/video.mjpg"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.mark.slow  # capture processes, and the backoff waited out
def test_a_camera_that_drops_after_each_frame_backs_off() -> None:
    """Half a second of frames per connection must not reset the backoff: retries slow down.

    Before, each frame reset it: a new capture process (an OpenCV import, 150-200 ms of CPU)
    and two retained events every ``reconnect_first`` + start-up, for ever.
    """
    server = _OneFrameCamera()
    seen = _Seen()
    spec = CameraSpec(
        "flappy",
        server.url,
        fps=20.0,
        open_timeout_s=3.0,
        read_timeout_s=1.0,
        reconnect_first_s=0.1,
        reconnect_max_s=3.0,
    )
    cam = CameraSource(spec, ByteBudget(10**9), seen.item, lambda *a: None, seen.change)
    cam.start()
    try:
        wait_for(lambda: len(server.arrivals) >= 7, 60, "seven connections")
    finally:
        cam.stop()
        server.close()
    gaps = [b - a for a, b in zip(server.arrivals, server.arrivals[1:], strict=False)]
    # attempt 5 waits 0.1 * 2**5 = 3.2 s, capped at 3 s, -20 % jitter at most: >= 2.4 s
    assert gaps[5] >= 2.4, gaps
    assert seen.count() >= 6  # each connection gave its frame
    assert cam.health().outages >= 6


@pytest.mark.slow  # capture processes
def test_the_backoff_starts_over_once_frames_flowed_long_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frames for ``STABLE_S`` in one capture: the next outage is retried from the start."""
    monkeypatch.setattr(camera_source, "STABLE_S", 0.5)
    server = _OneFrameCamera(burst=40)  # two seconds of frames per connection
    seen = _Seen()
    spec = CameraSpec(
        "steady-ish",
        server.url,
        fps=20.0,
        open_timeout_s=3.0,
        read_timeout_s=1.0,
        reconnect_first_s=0.1,
        reconnect_max_s=3.0,
    )
    cam = CameraSource(spec, ByteBudget(10**9), seen.item, lambda *a: None, seen.change)
    cam.start()
    try:
        wait_for(lambda: cam.health().reconnects >= 3, 60, "frames on four connections")
    finally:
        cam.stop()
        server.close()
    assert cam._backoff.attempt <= 1  # reset by each long enough run of frames
    assert len(server.arrivals) >= 4


class _SilentServer:
    """Accepts TCP connections and never answers (a camera whose RTSP daemon is wedged)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._closing = True
        self._sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.slow  # capture processes wait out their open timeout
def test_an_rtsp_server_that_never_answers_is_down_with_the_reason() -> None:
    server = _SilentServer()
    seen = _Seen()
    url = f"rtsp://viewer:{SECRET}@127.0.0.1:{server.port}/cam"
    spec = CameraSpec(
        "mute",
        url,
        open_timeout_s=1.0,
        reconnect_first_s=0.1,
        reconnect_max_s=0.2,
        unhealthy_after_s=2.0,
    )
    cam = CameraSource(spec, ByteBudget(10**9), seen.item, lambda *a: None, seen.change)
    cam.start()
    try:
        wait_for(
            lambda: cam.health().state == "failed" and cam.health().failed_attempts >= 3,
            40,
            "failed past the grace, retrying",
        )
        health = cam.health()
    finally:
        cam.stop()
        server.close()
    assert len(server.accepted) >= 3  # it did connect, each time
    assert health.unhealthy and health.outages == 1 and seen.count() == 0
    assert "no answer within 1 s" in (health.last_error or ""), health.last_error
    assert [c.state for c in seen.changes] == ["reconnecting", "failed", "stopped"]
    for text in (repr(health), *(repr(c) for c in seen.changes)):
        assert SECRET not in text


@pytest.mark.slow  # a capture process
def test_stop_while_connecting_to_a_server_that_never_answers_is_prompt() -> None:
    server = _SilentServer()
    spec = CameraSpec("mute", f"rtsp://127.0.0.1:{server.port}/cam", open_timeout_s=30.0)
    cam = CameraSource(spec, ByteBudget(10**9), lambda item: None, lambda *a: None)
    cam.start()
    try:
        wait_for(lambda: len(server.accepted) >= 1, 30, "the capture connecting")
        t0 = time.monotonic()
        cam.stop()
        took = time.monotonic() - t0
    finally:
        server.close()
    assert took < 8.0 and cam.finished.is_set()
    assert cam.health().state == "stopped"


H264_320 = (
    "( videotestsrc is-live=true pattern=snow "
    "! video/x-raw,width=320,height=240,framerate=10/1,format=I420 "
    "! openh264enc ! rtph264pay name=pay0 pt=96 config-interval=1 )"
)


class _SwitchingRtspServer(RtspServer):
    """The helper's RTSP server, whose pipeline (resolution, codec) the test changes."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self._script = tmp_path / "rtsp_server.py"
        self.serve(None)

    def serve(self, pipeline: str | None) -> None:
        text = (HELPERS / "rtsp_server.py").read_text()
        if pipeline is not None:
            head, _, rest = text.partition("PIPELINE = (")
            text = head + f"PIPELINE = {pipeline!r}\n_OLD = (" + rest
        self._script.write_text(text)

    def start(self, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while True:
            self._proc = subprocess.Popen(
                [self.python, str(self._script), str(self.port)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert self._proc.stdout is not None
            if self._proc.stdout.readline().strip() == b"ready":
                return
            self._proc.wait()
            assert time.monotonic() < end, f"RTSP server did not start on port {self.port}"
            time.sleep(0.2)


def _has_gst_element(name: str) -> bool:
    probe = (
        "import gi; gi.require_version('Gst', '1.0'); from gi.repository import Gst; "
        f"Gst.init(None); assert Gst.ElementFactory.find({name!r})"
    )
    return (
        subprocess.run([rtsp_python(), "-c", probe], capture_output=True, timeout=60).returncode
        == 0
    )


def _size(item: Item) -> tuple[int, ...]:
    img = cv2.imdecode(np.frombuffer(item.data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None, "not a JPEG"
    return tuple(img.shape)


@pytest.mark.slow  # a real RTSP server, restarted
def test_a_camera_back_with_another_resolution_and_codec_streams_it(tmp_path: Path) -> None:
    """JPEG 160x120, then (the camera reconfigured and rebooted) H.264 320x240, same URL."""
    if not _has_gst_element("openh264enc"):
        pytest.skip("no openh264enc in this GStreamer (gstreamer1.0-plugins-bad)")
    seen = _Seen()
    server = _SwitchingRtspServer(tmp_path)
    server.start()
    spec = CameraSpec(
        "gate",
        server.url,
        fps=10.0,
        open_timeout_s=5.0,
        read_timeout_s=1.5,
        reconnect_first_s=0.2,
        reconnect_max_s=0.5,
    )
    cam = CameraSource(spec, ByteBudget(10**9), seen.item, lambda *a: None, seen.change)
    cam.start()
    try:
        wait_for(lambda: seen.count() >= 3, 30, "JPEG frames")
        server.stop()
        wait_for(lambda: cam.health().state == "reconnecting", 15, "the outage")
        server.serve(H264_320)
        server.start()
        before = seen.count()
        wait_for(lambda: seen.count() >= before + 3, 40, "H.264 frames")
    finally:
        cam.stop()
        server.stop()
    assert _size(seen.items[0]) == (120, 160, 3)
    assert _size(seen.items[-1]) == (240, 320, 3)
    assert [c.state for c in seen.changes] == ["streaming", "reconnecting", "streaming", "stopped"]


@pytest.mark.slow  # a real RTSP server and capture process
def test_a_pipeline_slower_than_the_camera_drops_counted_frames_and_stays_up() -> None:
    """A sink stalled past ``read_timeout``, a full budget: no false outage, drops counted.

    The frames refused are counted, not queued (the pipe blocks the capture meanwhile).
    """
    seen = _Seen()
    budget = ByteBudget(8_000)  # a few 160x120 frames, never given back by this sink
    stalled = threading.Event()

    def slow_sink(item: Item) -> None:
        seen.item(item)
        if not stalled.is_set():
            stalled.set()
            time.sleep(4.0)  # a model far slower than the camera, once

    with RtspServer() as server:
        spec = CameraSpec("gate", server.url, fps=10.0, open_timeout_s=5.0, read_timeout_s=1.0)
        cam = CameraSource(spec, budget, slow_sink, lambda *a: None, seen.change)
        cam.start()
        try:
            wait_for(lambda: cam.stats.skipped >= 20, 40, "frames refused by the full budget")
            health = cam.health()
        finally:
            cam.stop()
    assert [c.state for c in seen.changes] == ["streaming", "stopped"], seen.changes
    assert health.failed_attempts == 0 and health.outages == 0
    assert cam.stats.taken == seen.count() and cam.stats.taken_bytes <= 8_000
    assert cam.health().frames == cam.stats.taken + cam.stats.skipped  # all counted


def test_the_camera_settings_never_show_the_password_in_their_repr() -> None:
    """What a ``log.debug("%s", spec)``, an assertion message or a crash reporter shows."""
    url = f"rtsp://viewer:{SECRET}@cam/s1?token={SECRET}"
    spec = CameraSpec("gate", url)
    for obj in (spec, spec.capture_settings(), CaptureSettings(url=url)):
        assert SECRET not in repr(obj) and SECRET not in str(obj)
        assert "viewer:***@cam" in repr(obj)
    assert spec.url == url and spec.capture_settings().url == url  # the real one, for use
    assert CaptureSettings.from_json(spec.capture_settings().to_json()).url == url


def test_a_url_with_a_stray_space_keeps_its_rtsp_transport() -> None:
    """``url: " ${CAM_URL}"``: the capture opens the stripped URL, so the options must match."""
    settings = CaptureSettings(url="  rtsp://cam/1 ", rtsp_transport="udp")
    assert ffmpeg_options(settings) == "rtsp_transport;udp"
