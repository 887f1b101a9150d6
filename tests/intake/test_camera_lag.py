"""How far a live capture's grabs run behind the stream's own clock: measured and reported.

``grab()`` decodes every frame: a stream faster than the board decodes (or delivered late)
builds a backlog that the grab time (``ts_ns``) does not show. The capture process compares
the wall clock with the stream's position (``CAP_PROP_POS_MSEC``) and reports the lag.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import psutil
import pytest
from helpers.agent_runs import wait_for
from helpers.camera_servers import RtspServer

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.lag import BEHIND_S, LagMeter, has_stream_clock
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.window.items import Item


def test_a_grabber_that_keeps_up_has_no_lag() -> None:
    meter = LagMeter()
    lags = [meter.add(100.0 + n / 25, 40.0 * (n + 1)) for n in range(2000)]
    assert all(lag == pytest.approx(0.0, abs=1e-9) for lag in lags)


def test_a_grabber_at_half_the_stream_rate_lags_by_half_the_time() -> None:
    meter = LagMeter()
    lags = [meter.add(100.0 + n / 25, 20.0 * (n + 1)) for n in range(251)]  # 10 s of wall
    assert lags[-1] == pytest.approx(5.0, abs=1e-6)


def test_frames_arriving_ahead_of_their_clock_are_no_lag() -> None:
    meter = LagMeter()  # a buffered burst read out quickly: the position runs ahead
    lags = [meter.add(100.0 + n / 100, 40.0 * (n + 1)) for n in range(500)]
    assert max(lags, key=lambda x: x or 0.0) == 0.0


def test_a_camera_clock_slow_by_100_ppm_moves_the_floor_along() -> None:
    meter = LagMeter()  # 2 h at 1 frame/s: 0.72 s of drift, the window keeps 10 minutes
    lag = None
    for n in range(7200):
        lag = meter.add(100.0 + n, 1000.0 * n * (1 - 1e-4) + 1.0)
    assert lag is not None and lag <= 600 * 1e-4 + 1e-6


def test_no_figure_without_a_stream_clock_and_a_clock_that_goes_back_starts_over() -> None:
    meter = LagMeter()
    assert meter.add(100.0, 0.0) is None and meter.add(100.1, float("nan")) is None
    assert meter.add(100.2, -1.0) is None
    for n in range(50):
        meter.add(101.0 + n, 10.0 * n + 1.0)  # falling behind: 0.99 s a second
    assert (meter.add(160.0, 5.0) or 0.0) == 0.0  # the stream restarted its clock


def test_only_rtsp_has_a_clock_to_trust() -> None:
    """FFmpeg's MJPEG demuxers invent a 25 frames/s clock: no figure rather than a false one."""
    assert has_stream_clock("rtsp://cam/x") and has_stream_clock(" RTSPS://cam/x")
    for url in ("http://cam/video.mjpg", "/dev/video0", "/run/cam.fifo", "0", "clip.mp4"):
        assert not has_stream_clock(url), url


def test_an_rtsp_capture_that_falls_behind_reports_the_lag_once_and_catches_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The capture process frozen for 2.5 s: the frames sent meanwhile are grabbed late.

    When it runs again, its grabs are 2.5 s behind the camera's clock (RTP timestamps); it
    reads the backlog out and catches up. One event, no outage.
    """
    items: list[Item] = []
    lock = threading.Lock()

    def sink(item: Item) -> None:
        with lock:
            items.append(item)

    with RtspServer() as server, caplog.at_level(logging.INFO, logger="cdml_edge.intake"):
        before = {p.pid for p in psutil.Process().children()}
        spec = CameraSpec("cam", server.url, fps=5.0, read_timeout_s=10.0)
        cam = CameraSource(spec, ByteBudget(10**9), sink, lambda *a: None)
        cam.start()
        try:
            wait_for(lambda: cam.health().lag_s is not None, timeout=30, what="a lag report")
            assert cam.health().lag_s < BEHIND_S  # type: ignore[operator]  # keeping up
            (capture,) = {p.pid for p in psutil.Process().children()} - before
            os.kill(capture, signal.SIGSTOP)
            time.sleep(2.5)  # the camera goes on sending: the frames wait in the socket
            os.kill(capture, signal.SIGCONT)
            wait_for(lambda: cam.health().fell_behind == 1, timeout=20, what="the lag event")
            wait_for(
                lambda: (cam.health().lag_s or 0.0) < BEHIND_S / 2, timeout=20, what="caught up"
            )
            snap = cam.health()
        finally:
            cam.stop()
    assert snap.state == "streaming" and snap.outages == 0 and snap.fell_behind == 1
    said = [r.getMessage() for r in caplog.records if r.name.startswith("cdml_edge.intake")]
    behind = [m for m in said if "behind the stream" in m]
    assert len(behind) == 1 and any("caught up" in m for m in said), said
    seconds = float(behind[0].split("grabs run ")[1].split(" s ")[0])
    assert 1.5 <= seconds <= 10, behind  # about the 2.5 s frozen, give or take the report
