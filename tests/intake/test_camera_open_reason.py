"""A video file the camera cannot open says why, in FFmpeg's own words.

The capture process reported only "cannot open with ffmpeg (absent, refused or
unreadable)"; FFmpeg's reason (``moov atom not found`` for an empty or cut ``.mp4``) stayed in
its stderr, published only when the process exited without reporting a failure. Real files,
real capture processes.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.agent_runs import wait_for

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.link import failure_detail
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.intake.camera.status import CameraTransition

SECRET = "Zq7SECRETpw"


def _last_error(path: Path | str) -> tuple[str, list[CameraTransition]]:
    changes: list[CameraTransition] = []
    lock = threading.Lock()

    def changed(change: CameraTransition) -> None:
        with lock:
            changes.append(change)

    spec = CameraSpec(
        "belt", str(path), reconnect_first_s=0.1, reconnect_max_s=0.2, unhealthy_after_s=30.0
    )
    cam = CameraSource(spec, ByteBudget(10**9), lambda item: None, lambda *a: None, changed)
    cam.start()
    try:
        wait_for(lambda: cam.health().last_error is not None, 60, "a failed attempt")
        error = cam.health().last_error
    finally:
        cam.stop()
    assert error is not None
    with lock:
        return error, list(changes)


def _cut_mp4(tmp_path: Path) -> Path:
    """A real MPEG-4 video cut in half, as a copy interrupted mid-way leaves it."""
    whole = tmp_path / "whole.mp4"
    writer = cv2.VideoWriter(str(whole), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (64, 48))
    assert writer.isOpened()
    for i in range(20):
        writer.write(np.full((48, 64, 3), i * 10, dtype=np.uint8))
    writer.release()
    data = whole.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    return cut


@pytest.mark.slow  # capture processes
@pytest.mark.parametrize("kind", ["empty", "cut"])
def test_a_file_ffmpeg_cannot_open_fails_with_ffmpegs_reason(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "e.mp4"
    if kind == "empty":
        path.write_bytes(b"")
    else:
        path = _cut_mp4(tmp_path)
    error, changes = _last_error(path)
    assert error.startswith("cannot open with ffmpeg"), error
    assert "moov atom not found" in error, error
    assert "@ 0x" not in error, error  # FFmpeg's context address: different on each try
    assert any("moov atom not found" in (c.reason or "") for c in changes), changes


@pytest.mark.slow  # a capture process
def test_a_refused_rtsp_camera_says_so_without_its_password() -> None:
    with socket.socket() as sock:  # a port nothing listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        error, changes = _last_error(f"rtsp://viewer:{SECRET}@127.0.0.1:{port}/cam")
    assert "Connection refused" in error, error  # FFmpeg's words, not only ours
    for text in (error, *(repr(c) for c in changes)):
        assert SECRET not in text, text


def test_the_detail_is_the_last_line_without_ffmpegs_context_address() -> None:
    tail = [
        "[ WARN:0@0.010] global cap.cpp:164 open VIDEOIO(FFMPEG): raised",
        "[mov,mp4,m4a,3gp,3g2,mj2 @ 0x5599428e01c0] moov atom not found",
        "",
    ]
    assert failure_detail(tail) == "mov,mp4,m4a,3gp,3g2,mj2: moov atom not found"
    assert failure_detail(["[rtsp @ 0x7f] method DESCRIBE failed: 401 Unauthorized"]) == (
        "rtsp: method DESCRIBE failed: 401 Unauthorized"
    )
    assert failure_detail(["[ WARN:0@12.345] global cap.cpp:164 open raised"]) == (
        "WARN: global cap.cpp:164 open raised"
    )
    assert failure_detail([]) is None
    assert failure_detail(["   "]) is None
