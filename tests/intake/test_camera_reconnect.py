"""Cameras that come back: real servers started, stopped, stalled and plugged in by the tests.

* an RTSP camera (GStreamer's RTSP server) killed and restarted on its port;
* an MJPEG-over-HTTP camera (a server in the test) that stalls mid-stream;
* a camera path that does not exist at start and appears later: a FIFO fed JPEG frames (the
  stand-in for a device node, as no V4L2 loopback exists here), and a video file;
* a FIFO with no writer, where the open blocks inside OpenCV: the capture process is killed.

Each outage must be reported once (one ``reconnecting`` change, however many retries), frames
must flow again without a restart, and the camera's health must show the outage meanwhile.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import psutil
import pytest
from helpers.agent_runs import wait_for
from helpers.camera_servers import FifoCamera, MjpegServer, RtspServer

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.intake.camera.status import CameraTransition
from cdml_edge.window.items import Item

# real camera servers and capture processes; several tests wait out the capture timeouts
pytestmark = pytest.mark.slow


class Recorder:
    """Collects a camera's items and state changes."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.changes: list[CameraTransition] = []
        self.errors: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, item: Item) -> None:
        with self._lock:
            self.items.append(item)

    def error(self, *args: Any) -> None:
        self.errors.append(args)

    def change(self, change: CameraTransition) -> None:
        with self._lock:
            self.changes.append(change)

    def count(self) -> int:
        with self._lock:
            return len(self.items)

    def states(self) -> list[str]:
        with self._lock:
            return [c.state for c in self.changes]


def camera(url: str, rec: Recorder, **kw: Any) -> CameraSource:
    opts: dict[str, Any] = dict(
        fps=20.0,
        open_timeout_s=3.0,
        read_timeout_s=1.5,
        reconnect_first_s=0.2,
        reconnect_max_s=0.5,
        unhealthy_after_s=60.0,
    )
    opts.update(kw)
    spec = CameraSpec("cam", url, **opts)
    return CameraSource(spec, ByteBudget(10**9), rec, rec.error, rec.change)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_rtsp_camera_stopped_and_restarted_comes_back(tmp_path: Path) -> None:
    rec = Recorder()
    with RtspServer() as server:
        cam = camera(server.url, rec)
        cam.start()
        try:
            wait_for(lambda: rec.count() >= 5, timeout=30, what="frames over RTSP")
            assert rec.states() == ["streaming"]
            img = cv2.imdecode(np.frombuffer(rec.items[0].data, np.uint8), cv2.IMREAD_COLOR)
            assert img.shape == (120, 160, 3)

            server.stop()  # the camera reboots
            wait_for(
                lambda: cam.health().state == "reconnecting", timeout=15, what="the outage noticed"
            )
            wait_for(
                lambda: cam.health().failed_attempts >= 3,
                timeout=20,
                what="three failed reconnects",
            )
            during = cam.health()
            assert during.down_for_s is not None and during.down_for_s > 0
            assert during.last_frame_age_s is not None and during.last_frame_age_s > 0
            before = rec.count()

            server.start()  # it is back, on the same address
            wait_for(lambda: rec.count() >= before + 5, timeout=30, what="frames again")
        finally:
            cam.stop()
    # one change per outage and one on recovery, whatever the number of retries
    assert rec.states()[:3] == ["streaming", "reconnecting", "streaming"]
    down, up = rec.changes[1], rec.changes[2]
    assert down.reason and up.reason == down.reason
    assert up.down_for_s is not None and up.down_for_s >= during.down_for_s
    after = cam.health()
    assert after.outages == 1 and after.reconnects == 1 and after.failed_attempts >= 3
    assert rec.states()[-1] == "stopped" and cam.finished.is_set()


def test_mjpeg_camera_that_stalls_mid_stream_is_reopened() -> None:
    rec = Recorder()
    with MjpegServer(fps=20, stall_after=10) as server:
        cam = camera(server.url, rec, read_timeout_s=1.0)
        cam.start()
        try:
            wait_for(lambda: server.connections >= 2, timeout=30, what="a second connection")
            wait_for(lambda: rec.count() >= 15, timeout=30, what="frames after the stall")
        finally:
            cam.stop()
    assert rec.states()[:3] == ["streaming", "reconnecting", "streaming"]
    assert "no frame within 1 s" in (rec.changes[1].reason or "")
    # the stall was found by the read timeout: about 1 s after the last frame, not minutes
    assert rec.changes[1].down_for_s is not None and rec.changes[1].down_for_s < 5
    assert cam.health().outages == 1


def test_capture_process_that_freezes_is_killed_and_replaced() -> None:
    """A capture wedged so hard it cannot even report its own timeout (SIGSTOP).

    The agent hears nothing for read_timeout + 2 s, kills it and starts a new one.
    """
    rec = Recorder()
    before = _children()
    with MjpegServer(fps=20) as server:
        cam = camera(server.url, rec, read_timeout_s=1.0)
        cam.start()
        try:
            wait_for(lambda: rec.count() >= 5, timeout=30, what="frames")
            (frozen,) = _children() - before
            os.kill(frozen, signal.SIGSTOP)
            wait_for(lambda: cam.health().state == "reconnecting", timeout=10, what="detected")
            count = rec.count()
            wait_for(lambda: rec.count() >= count + 5, timeout=30, what="frames again")
            assert not psutil.pid_exists(frozen) or psutil.Process(frozen).status() == "zombie"
        finally:
            cam.stop()
    assert rec.changes[1].reason == "no frame within 3 s (stalled; capture process killed)"


def test_camera_path_that_appears_later_fifo(tmp_path: Path) -> None:
    """A path not there at start, then a FIFO of JPEG frames, then unplugged and plugged again.

    The missing path is a camera not yet plugged in; the FIFO stands in for the device node.
    """
    path = tmp_path / "video-cam"
    rec = Recorder()
    fifo = FifoCamera(path)
    cam = camera(str(path), rec, open_timeout_s=2.0, unhealthy_after_s=1.0)
    cam.start()
    try:
        wait_for(
            lambda: cam.health().state == "failed" and cam.health().failed_attempts >= 2,
            timeout=20,
            what="failed past the grace, retrying",
        )
        snap = cam.health()
        assert snap.unhealthy and rec.count() == 0
        assert "cannot open with ffmpeg" in (snap.last_error or "")

        fifo.plug()
        wait_for(lambda: rec.count() >= 5, timeout=30, what="frames from the new device")
        assert cam.health().state == "streaming" and not cam.health().unhealthy

        fifo.unplug()
        wait_for(
            lambda: cam.health().state in ("reconnecting", "failed"),
            timeout=15,
            what="the unplug noticed",
        )
        before = rec.count()
        fifo.plug()
        wait_for(lambda: rec.count() >= before + 5, timeout=30, what="frames after replug")
    finally:
        cam.stop()
        fifo.unplug()
    states = rec.states()
    assert states[:3] == ["reconnecting", "failed", "streaming"]  # one change each, not per retry
    assert states.count("streaming") == 2
    assert cam.health().reconnects == 2


def test_video_file_that_appears_later(tmp_path: Path) -> None:
    path = tmp_path / "clip.avi"
    rec = Recorder()
    cam = camera(str(path), rec, loop=True)
    cam.start()
    try:
        wait_for(lambda: cam.health().failed_attempts >= 2, timeout=20, what="retries")
        tmp = tmp_path / "clip.tmp.avi"
        vw = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"MJPG"), 25, (32, 24))
        for n in range(3):
            vw.write(np.full((24, 32, 3), n * 80, np.uint8))
        vw.release()
        os.rename(tmp, path)
        wait_for(lambda: rec.count() >= 6, timeout=30, what="frames of the looping file")
    finally:
        cam.stop()
    assert rec.states()[:2] == ["reconnecting", "streaming"]


def test_open_that_blocks_inside_opencv_is_killed(tmp_path: Path) -> None:
    """A FIFO nobody writes: open(2) blocks inside OpenCV, past any timeout of its own.

    The capture process is killed after open_timeout (+2 s) and the camera keeps trying.
    """
    path = tmp_path / "silent"
    os.mkfifo(path)
    rec = Recorder()
    before = _children()
    cam = camera(str(path), rec, open_timeout_s=0.5)
    cam.start()
    try:
        wait_for(lambda: cam.health().failed_attempts >= 2, timeout=40, what="two killed opens")
        assert "open did not finish within 2.5 s" in (cam.health().last_error or "")
        assert cam._thread.is_alive()
    finally:
        cam.stop()
    assert rec.states() == ["reconnecting", "stopped"]
    wait_for(lambda: _children() <= before, timeout=10, what="no capture process left")


def test_gstreamer_pipeline_without_gstreamer_says_so() -> None:
    if "GStreamer:                   YES" in cv2.getBuildInformation():
        pytest.skip("this OpenCV has GStreamer: the refusal cannot be shown")
    rec = Recorder()
    cam = camera("videotestsrc ! videoconvert ! appsink", rec)
    cam.start()
    try:
        wait_for(lambda: cam.health().failed_attempts >= 1, timeout=30, what="a failed open")
    finally:
        cam.stop()
    assert "no GStreamer backend" in (cam.health().last_error or "")


def test_stop_while_connecting_returns_promptly(tmp_path: Path) -> None:
    path = tmp_path / "silent"
    os.mkfifo(path)
    cam = camera(str(path), Recorder(), open_timeout_s=30.0)
    cam.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    cam.stop()
    assert time.monotonic() - t0 < 3.0 and cam.finished.is_set()
