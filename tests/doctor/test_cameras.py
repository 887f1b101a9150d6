"""``doctor`` checks camera sources as the agent would open them; never a password in a line.

Devices exist and can be opened by the service's account, stream servers answer on TCP, files
and FIFOs are there, GStreamer pipelines have an OpenCV that speaks GStreamer.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdml_edge.config import parse_config
from cdml_edge.doctor.access import Account
from cdml_edge.doctor.sources import check_source


def _camera(url: Any, **extra: Any) -> Any:
    cfg = parse_config(
        {"sources": [{"name": "cam", "kind": "camera", "modality": "image", "url": url, **extra}]}
    )
    return cfg.sources[0]


@pytest.fixture
def listening() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = int(srv.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield port
    stop.set()
    t.join(2)
    srv.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["rtsp", "rtsps", "rtmp", "http", "https"])
def test_stream_servers_are_probed_on_tcp(scheme: str, listening: int) -> None:
    ok = check_source(_camera(f"{scheme}://viewer:s3cret@127.0.0.1:{listening}/live"), 2.0)
    assert ok.ok and not ok.warn and f"127.0.0.1:{listening} reachable" in ok.detail
    port = _closed_port()
    down = check_source(_camera(f"{scheme}://viewer:s3cret@127.0.0.1:{port}/live"), 2.0)
    assert not down.ok and "unreachable" in down.detail
    assert "s3cret" not in ok.line() + down.line()


def test_connectionless_streams_are_a_caveat_not_a_failure() -> None:
    for url in ("udp://239.0.0.1:5000", "srt://127.0.0.1:9000?mode=caller"):
        c = check_source(_camera(url), 1.0)
        assert c.ok and c.warn and "not probed" in c.detail


def test_device_paths_must_exist_and_be_devices(tmp_path: Path) -> None:
    assert check_source(_camera("/dev/null"), 1.0).ok  # a character device, readable
    missing = check_source(_camera("/dev/video97"), 1.0)
    assert not missing.ok and "/dev/video97 does not exist" in missing.detail
    not_dev = tmp_path / "not-a-device"
    not_dev.write_bytes(b"")
    c = check_source(_camera(str(not_dev), backend="v4l2"), 1.0)
    assert not c.ok and "not a device" in c.detail


def test_access_is_judged_for_the_service_account(tmp_path: Path) -> None:
    nobody = Account("nobody", 65534, frozenset({65534}))
    assert os.stat("/dev/null").st_mode & 0o006 == 0o006  # world read-write everywhere
    assert check_source(_camera("/dev/null"), 1.0, nobody).ok
    fifo = tmp_path / "frames.mjpg"
    os.mkfifo(fifo, 0o600)  # owner-only, in the test's own folder: the account cannot open it
    c = check_source(_camera(str(fifo)), 1.0, nobody)
    assert not c.ok and "nobody" in c.detail
    assert check_source(_camera(str(fifo)), 1.0).ok  # the caller (owner) can


def test_files_and_fifos(tmp_path: Path) -> None:
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\0" * 16)
    assert check_source(_camera(str(video)), 1.0).ok
    fifo = tmp_path / "frames.mjpg"
    os.mkfifo(fifo)
    c = check_source(_camera(str(fifo)), 1.0)
    assert c.ok and "FIFO" in c.detail
    gone = check_source(_camera(str(tmp_path / "gone.mp4")), 1.0)
    assert not gone.ok and "does not exist" in gone.detail


def test_a_gstreamer_pipeline_needs_an_opencv_with_gstreamer() -> None:
    import cv2

    has = "GStreamer:                   YES" in cv2.getBuildInformation()
    c = check_source(_camera("videotestsrc ! videoconvert ! appsink"), 1.0)
    assert c.ok == has
    assert ("no GStreamer backend" in c.detail) != has
