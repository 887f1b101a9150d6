"""A camera password that holds ``@`` (``url: rtsp://viewer:${CAM_PASSWORD}@cam/...``).

FFmpeg takes the user information up to the last ``@`` before the host, so such a URL streams;
its password must not show, even in part, in the log, the state changes (published retained
on ``{source}/camera``) or the health. Before, ``rtsp://viewer:p@ss@host`` was shown as
``rtsp://viewer:***@ss@host``, and a password holding ``/`` was shown whole.
"""

from __future__ import annotations

import logging
import threading

import pytest
from helpers.agent_runs import wait_for
from helpers.camera_servers import RtspServer

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.settings import redact_url
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.intake.camera.status import CameraTransition
from cdml_edge.window.items import Item

pytestmark = pytest.mark.slow  # a real RTSP server and capture process


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("rtsp://viewer:p@ss@cam/stream1", "rtsp://viewer:***@cam/stream1"),
        ("rtsp://viewer:pa/ss@cam:554/stream1", "rtsp://viewer:***@cam:554/stream1"),
        ("rtsp://viewer:a:b@[fe80::1]:554/x", "rtsp://viewer:***@[fe80::1]:554/x"),
        ("http://cam/video.mjpg?user=a@b", "http://cam/video.mjpg?user=a@b"),
        ("rtsp://cam/path@tag", "rtsp://cam/path@tag"),
    ],
)
def test_the_whole_password_is_hidden(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_password_with_an_at_sign_streams_and_never_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "s3cr@tPart"
    items: list[Item] = []
    changes: list[CameraTransition] = []
    lock = threading.Lock()

    def sink(item: Item) -> None:
        with lock:
            items.append(item)

    def change(c: CameraTransition) -> None:
        with lock:
            changes.append(c)

    with RtspServer() as server:
        url = server.url.replace("rtsp://", f"rtsp://viewer:{secret}@")
        spec = CameraSpec("gate", url, fps=5.0, open_timeout_s=5.0, read_timeout_s=3.0)
        cam = CameraSource(spec, ByteBudget(10**9), sink, lambda *a: None, change)
        caplog.set_level(logging.DEBUG, logger="cdml_edge")
        cam.start()
        try:
            wait_for(lambda: len(items) >= 2, 30, "frames through a URL whose password has '@'")
            health = cam.health()
        finally:
            cam.stop()
    shown = [cam.url, repr(health), caplog.text, *(repr(c) for c in changes)]
    for text in shown:
        assert "tPart" not in text and secret not in text, text
    assert cam.url == server.url.replace("rtsp://", "rtsp://viewer:***@")
