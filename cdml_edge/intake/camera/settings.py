"""What a capture process is asked to open, and how a camera URL maps to an OpenCV backend."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass
from typing import Literal

Backend = Literal["auto", "ffmpeg", "v4l2", "gstreamer"]
Mode = Literal["live", "file"]

STREAM_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt")


@dataclass(frozen=True)
class CaptureSettings:
    """One camera as the capture process opens it (sent to the child as JSON on its stdin)."""

    url: str
    backend: Backend = "auto"
    rtsp_transport: Literal["tcp", "udp"] = "tcp"
    fps: float = 5.0
    jpeg_quality: int = 90
    loop: bool = False
    open_timeout_s: float = 10.0
    read_timeout_s: float = 5.0

    def to_json(self) -> str:
        """The settings as one line of JSON (what the child reads)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaptureSettings:
        """The settings :meth:`to_json` wrote."""
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Target:
    """What ``cv2.VideoCapture`` is given: the device index or URL, the backend, the mode.

    ``live`` (streams, devices, FIFOs) grabs every frame the camera sends and keeps one per
    ``1/fps``; ``file`` (a regular video file) reads one frame per ``1/fps`` and ends.
    """

    source: int | str
    api: Literal["ffmpeg", "v4l2", "gstreamer"]
    mode: Mode


def resolve_target(settings: CaptureSettings) -> Target:
    """The backend and mode of ``settings.url`` (``backend: auto`` guesses from the URL).

    A device index (``0``) or a ``/dev/...`` path is V4L2, a string with `` ! `` a GStreamer
    pipeline, anything else FFmpeg: a stream URL, or a path (a regular file is played, a
    FIFO or device is read live).
    """
    url = settings.url.strip()
    api = settings.backend
    if api == "auto":
        if url.isdigit() or url.startswith("/dev/"):
            api = "v4l2"
        elif " ! " in url:
            api = "gstreamer"
        else:
            api = "ffmpeg"
    source: int | str = int(url) if url.isdigit() else url
    mode: Mode = "live"
    if api == "ffmpeg" and isinstance(source, str) and not _is_stream(source):
        mode = "file" if _is_regular_file(source) else "live"
    return Target(source, api, mode)


def _is_stream(url: str) -> bool:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    return scheme in STREAM_SCHEMES


def _is_regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def ffmpeg_options(settings: CaptureSettings) -> str:
    """``OPENCV_FFMPEG_CAPTURE_OPTIONS`` for this camera (``key;value|key;value``)."""
    if settings.url.lower().startswith(("rtsp://", "rtsps://")):
        return f"rtsp_transport;{settings.rtsp_transport}"
    return ""


_CREDENTIALS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*)(:\S*)?"
    r"@(?=(\[[^\]\s]*\]|[^@\s/?#:\[\]]*)(:\d*)?([/?#\s]|$))"
)
"""``scheme://user[:password]@host``: the password runs to the last ``@`` before the host, as
FFmpeg reads it (a ``$CAM_PASSWORD`` holding ``@`` or ``/`` is not cut short)."""


def redact_url(url: str) -> str:
    """``url`` without its password (``rtsp://admin:***@cam/...``): safe for logs and health.

    A password holding ``@``, ``/`` or ``:`` (not percent-encoded) is hidden whole.
    """
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
