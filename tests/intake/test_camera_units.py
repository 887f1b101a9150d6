"""The camera's own logic without a camera.

State changes, backoff, the capture protocol, URL handling, configuration, and the health
board's rates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdml_edge.config import ConfigError
from cdml_edge.config.schema import AppConfig
from cdml_edge.health.cameras import _Rates
from cdml_edge.intake.camera import protocol
from cdml_edge.intake.camera.link import EXITED, CaptureProcess
from cdml_edge.intake.camera.settings import (
    CaptureSettings,
    ffmpeg_options,
    redact_url,
    resolve_target,
)
from cdml_edge.intake.camera.status import CameraStatus, CameraTransition


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _status(grace: float = 10.0) -> tuple[CameraStatus, list[CameraTransition], Clock]:
    changes: list[CameraTransition] = []
    clock = Clock()
    st = CameraStatus("cam", "rtsp://cam/x", grace, changes.append, clock=clock)
    return st, changes, clock


def test_one_change_per_outage_and_one_on_recovery() -> None:
    st, changes, clock = _status()
    st.frame()
    clock.t += 1
    st.frame()
    clock.t += 2
    st.lost("read timed out")
    for _ in range(5):
        clock.t += 1
        st.lost("cannot open")
        st.check_grace()
    st.frame()
    assert [(c.previous, c.state) for c in changes] == [
        ("connecting", "streaming"),
        ("streaming", "reconnecting"),
        ("reconnecting", "streaming"),
    ]
    down, up = changes[1], changes[2]
    assert down.reason == "read timed out" and down.down_for_s == 2.0  # since the last frame
    assert up.reason == "read timed out" and up.down_for_s == 7.0
    snap = st.snapshot()
    assert (snap.outages, snap.reconnects, snap.failed_attempts) == (1, 1, 6)
    assert snap.last_error == "cannot open" and snap.down_for_s is None and not snap.unhealthy


def test_down_past_the_grace_is_failed_once_and_unhealthy() -> None:
    st, changes, clock = _status(grace=10)
    st.lost("cannot open")
    clock.t += 9.9
    st.check_grace()
    assert st.state == "reconnecting" and not st.snapshot().unhealthy
    clock.t += 0.2
    st.check_grace()
    st.check_grace()
    assert st.state == "failed" and st.snapshot().unhealthy
    assert [c.state for c in changes] == ["reconnecting", "failed"]
    st.frame()
    assert st.state == "streaming" and st.snapshot().reconnects == 1


def test_camera_never_seen_goes_failed_after_the_grace() -> None:
    st, changes, clock = _status(grace=5)
    st.begin()
    clock.t += 6
    st.check_grace()
    assert [c.state for c in changes] == ["failed"] and st.snapshot().outages == 1


def test_finish_ends_an_outage() -> None:
    st, changes, _ = _status()
    st.lost("x")
    st.finish("stopped")
    st.finish("stopped")
    assert [c.state for c in changes] == ["reconnecting", "stopped"]
    assert st.snapshot().down_for_s is None and not st.snapshot().unhealthy


def test_protocol_splits_messages_across_reads_and_refuses_garbage() -> None:
    stream = protocol.encode(protocol.FRAME, b"\xff\xd8jpeg", 123) + protocol.encode(
        protocol.HEARTBEAT, b"{}"
    )
    dec = protocol.MessageDecoder()
    got = [m for i in range(len(stream)) for m in dec.feed(stream[i : i + 1])]
    assert [(m.kind, m.ts_ns, m.payload) for m in got] == [
        (protocol.FRAME, 123, b"\xff\xd8jpeg"),
        (protocol.HEARTBEAT, 0, b"{}"),
    ]
    assert dec.buffered == 0
    with pytest.raises(protocol.ProtocolError):
        protocol.MessageDecoder().feed(b"Z" + bytes(12))
    with pytest.raises(protocol.ProtocolError):
        too_long = protocol.HEADER.pack(protocol.FRAME, protocol.MAX_PAYLOAD + 1, 0)
        protocol.MessageDecoder().feed(too_long)


def test_passwords_never_leave_the_url() -> None:
    assert redact_url("rtsp://admin:s3cret@10.0.0.5:554/Streaming/101") == (
        "rtsp://admin:***@10.0.0.5:554/Streaming/101"
    )
    assert redact_url("http://user@cam/video.mjpg") == "http://user:***@cam/video.mjpg"
    assert redact_url("/dev/video0") == "/dev/video0"
    assert redact_url("0") == "0"


def test_targets_by_url(tmp_path: object) -> None:
    def target(url: str, **kw: object) -> tuple[object, str, str]:
        t = resolve_target(CaptureSettings(url=url, **kw))  # type: ignore[arg-type]
        return t.source, t.api, t.mode

    assert target("0") == (0, "v4l2", "live")
    assert target("/dev/video2") == ("/dev/video2", "v4l2", "live")
    assert target("rtsp://cam/1") == ("rtsp://cam/1", "ffmpeg", "live")
    pipe = "nvarguscamerasrc ! video/x-raw(memory:NVMM) ! nvvidconv ! appsink"
    assert target(pipe) == (pipe, "gstreamer", "live")
    assert target("/nowhere/clip.avi") == ("/nowhere/clip.avi", "ffmpeg", "live")
    assert target(__file__) == (__file__, "ffmpeg", "file")
    assert target("/dev/video0", backend="ffmpeg")[1] == "ffmpeg"
    assert ffmpeg_options(CaptureSettings(url="rtsp://cam/1")) == "rtsp_transport;tcp"
    udp = CaptureSettings(url="RTSP://cam/1", rtsp_transport="udp")
    assert ffmpeg_options(udp) == "rtsp_transport;udp"
    assert ffmpeg_options(CaptureSettings(url="http://cam/x.mjpg")) == ""
    settings = CaptureSettings(url="rtsp://a:b@c/d", fps=2.5, loop=True)
    assert CaptureSettings.from_json(settings.to_json()) == settings


def test_camera_config_fields() -> None:
    cfg = AppConfig.model_validate(
        {
            "sources": [
                {
                    "name": "gate",
                    "kind": "camera",
                    "url": "rtsp://cam/1",
                    "modality": "image",
                    "read_timeout": "2s",
                    "open_timeout": "500ms",
                    "reconnect_max": "1min",
                    "unhealthy_after": "90s",
                    "rtsp_transport": "udp",
                    "backend": "ffmpeg",
                    "loop": True,
                }
            ]
        }
    )
    sc = cfg.sources[0]
    assert (sc.read_timeout, sc.open_timeout, sc.reconnect_max, sc.unhealthy_after) == (
        2.0,
        0.5,
        60.0,
        90.0,
    )
    assert (sc.rtsp_transport, sc.backend, sc.loop) == ("udp", "ffmpeg", True)
    default = AppConfig.model_validate(
        {"sources": [{"name": "g", "kind": "camera", "url": 0, "modality": "image"}]}
    ).sources[0]
    assert default.rtsp_transport == "tcp" and default.backend == "auto"
    with pytest.raises((ValueError, ConfigError)):
        AppConfig.model_validate(
            {
                "sources": [
                    {
                        "name": "g",
                        "kind": "camera",
                        "url": 0,
                        "modality": "image",
                        "read_timeout": 0,
                    }
                ]
            }
        )
    with pytest.raises((ValueError, ConfigError)):
        AppConfig.model_validate(
            {
                "sources": [
                    {
                        "name": "g",
                        "kind": "camera",
                        "url": 0,
                        "modality": "image",
                        "rtsp_transport": "http",
                    }
                ]
            }
        )


def test_rates_over_at_least_five_seconds() -> None:
    r = _Rates()
    assert r.add(0.0, 0, 0) == (0.0, 0.0)
    assert r.add(0.5, 5, 0) == (0.0, 0.0)  # too short a span to say
    assert r.add(2.0, 20, 10) == (10.0, 5.0)
    for t in range(3, 12):
        fps_in, fps_out = r.add(float(t), t * 10, t * 5)
    assert (fps_in, fps_out) == (10.0, 5.0)
    fps_in, _ = r.add(20.0, 110, 55)  # no frame since t=11
    assert fps_in == 0.0


def _fake_child(tmp_path: Path, script: str) -> CaptureProcess:
    """A capture process that is a shell script: it reads its settings line, then ``script``."""
    exe = tmp_path / "child"
    exe.write_text(f"#!/bin/sh\nread line\n{script}\n")
    exe.chmod(0o755)
    return CaptureProcess(CaptureSettings(url="rtsp://u:p@cam/1"), python=str(exe))


def test_a_capture_process_that_dies_is_reported_with_its_stderr(tmp_path: Path) -> None:
    proc = _fake_child(tmp_path, "echo 'Segmentation fault in the driver' >&2\nexit 3")
    try:
        msg = proc.next_message(10.0)
        assert msg is not None and msg.kind == EXITED and msg.payload == b"3"
        assert proc.next_message(0.1) == msg  # and so on: the end is sticky
        assert proc.stderr_tail() == ["Segmentation fault in the driver"]
    finally:
        proc.close()


def test_garbage_from_the_capture_process_is_a_protocol_error(tmp_path: Path) -> None:
    proc = _fake_child(tmp_path, "echo 'this is not a message at all'\nsleep 5")
    try:
        with pytest.raises(protocol.ProtocolError):
            proc.next_message(10.0)
    finally:
        proc.close()
