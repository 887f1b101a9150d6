"""What a capture process is asked to open, and how a camera URL maps to an OpenCV backend."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

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

    def __repr__(self) -> str:  # the password stays out of logs, asserts, crash reports
        return repr_redacted(self)

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
    if settings.url.strip().lower().startswith(("rtsp://", "rtsps://")):
        return f"rtsp_transport;{settings.rtsp_transport}"
    return ""


_CREDENTIALS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/:\s]*)(?P<password>:[^\n]*)?"
    r"@(?=(\[[^\]\s]*\]|[^@\s/?#:\[\]]*)(:\d*)?([/?#\s'\"]|$))"
)
"""``scheme://user[:password]@host``: the user information runs to the last ``@`` before the
host, as FFmpeg reads it (a user name holding ``@``, a ``$CAM_PASSWORD`` holding ``@``, ``/``
or a space is not cut short)."""

_QUERY_SECRET = re.compile(
    r"(?i)(?P<key>[?&;][^=&#\s]*(?:pass|pwd|token|secret|key|auth|sig|cred)[^=&#\s]*=)"
    r"(?P<value>[^&#\s'\"]*)"
)
"""A query parameter that carries a secret (``?user=admin&pwd=...``, ``&access_token=...``):
cheap HTTP cameras take their password there."""


def redact_url(url: str) -> str:
    """``url`` without its secrets (``rtsp://admin:***@cam/...``): safe for logs and health.

    The password of the user information (the whole of it, up to the last ``@`` before the
    host) and the values of query parameters named like a secret (``pwd``, ``password``,
    ``token``, ``key``, ``auth``, ...) become ``***``.
    """
    url = _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", url)


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets :func:`redact_url` hides in ``url``, longest first (to clean other text)."""
    found = [m["password"][1:] for m in _CREDENTIALS.finditer(url) if m["password"]]
    found += [m["value"] for m in _QUERY_SECRET.finditer(url)]
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def repr_redacted(obj: Any) -> str:
    """A dataclass's repr with its ``url`` redacted (:func:`redact_url`)."""
    parts = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        shown = redact_url(value) if f.name == "url" else value
        parts.append(f"{f.name}={shown!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def redact_text(text: str, url: str) -> str:
    """``text`` (a log line of the capture process) without the secrets of ``url``."""
    text = redact_url(text)
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
