"""Camera sources, checked as the agent would open them.

Each URL is resolved by :func:`~cdml_edge.intake.camera.settings.resolve_target`, as the agent
does. Then a device exists, is a device and can be opened by the account; a stream server
answers on TCP (UDP and SRT are connectionless: a caveat, not probed); a video file or FIFO is
there and readable; a GStreamer pipeline needs an OpenCV built with GStreamer. Lines show the
URL without its password.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from urllib.parse import urlsplit

from cdml_edge.config import SourceConfig
from cdml_edge.doctor.access import Account, R, W
from cdml_edge.doctor.check import Check
from cdml_edge.intake.camera.settings import CaptureSettings, redact_url, resolve_target

TCP_PORTS = {"rtsp": 554, "rtsps": 322, "rtmp": 1935, "http": 80, "https": 443, "tcp": 0}
CONNECTIONLESS = ("udp", "srt")


def check_camera(
    name: str, src: SourceConfig, timeout_s: float, account: Account | None = None
) -> Check:
    """One camera source: reachable (stream), present and accessible (device, file, FIFO)."""
    url = str(src.url).strip()
    target = resolve_target(CaptureSettings(url=url, backend=src.backend))
    if target.api == "gstreamer":
        return _gstreamer(name)
    if isinstance(target.source, int):
        return _device(name, Path(f"/dev/video{target.source}"), account)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme:
        return _stream(name, url, scheme, timeout_s)
    if target.api == "v4l2":
        return _device(name, Path(url), account)
    return _file(name, Path(url), account)


def _stream(name: str, url: str, scheme: str, timeout_s: float) -> Check:
    shown = redact_url(url)
    if scheme in CONNECTIONLESS:
        return Check(name, True, f"{shown}: not probed ({scheme} is connectionless)", warn=True)
    if scheme not in TCP_PORTS:
        return Check(name, False, f"{shown}: unknown stream scheme {scheme!r}")
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or TCP_PORTS[scheme]
    if not host or not port:
        return Check(name, False, f"{shown}: no host and port to reach")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        return Check(name, False, f"{scheme}://{host}:{port} unreachable: {exc}")
    return Check(name, True, f"{scheme}://{host}:{port} reachable")


def _device(name: str, dev: Path, account: Account | None) -> Check:
    mode = _mode(dev)
    if mode is None:
        return Check(name, False, f"camera device {dev} does not exist (not plugged in?)")
    if not stat.S_ISCHR(mode):
        return Check(name, False, f"{dev} is not a device")
    return _opens(name, dev, "camera device", R | W, account, " (the 'video' group gives it)")


def _file(name: str, path: Path, account: Account | None) -> Check:
    mode = _mode(path)
    if mode is None:
        return Check(name, False, f"video file {path} does not exist")
    kind = (
        "FIFO"
        if stat.S_ISFIFO(mode)
        else "device"
        if stat.S_ISCHR(mode)
        else "video file"
        if stat.S_ISREG(mode)
        else ""
    )
    if not kind:
        return Check(name, False, f"{path} is neither a video file, a FIFO nor a device")
    return _opens(name, path, kind, R, account)


def _mode(path: Path) -> int | None:
    """The ``st_mode`` of ``path`` (links followed), ``None`` when there is nothing."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def _opens(
    name: str, path: Path, kind: str, want: int, account: Account | None, hint: str = ""
) -> Check:
    """The check of a camera input ``path`` of ``kind`` that must open for ``want``."""
    problem = _access(path, want, account)
    if problem:
        return Check(name, False, problem + hint)
    return Check(name, True, f"{kind} {path} {'accessible' if want & W else 'readable'}")


def _access(path: Path, want: int, account: Account | None) -> str | None:
    """Why ``path`` cannot be opened for ``want`` (R, R|W): by ``account``, else by us."""
    if account is not None:
        blocked = account.blocked_at(path)
        if blocked is not None:
            return f"{path}: {account.name} cannot enter {blocked}"
        if not account.allows(path, want):
            return f"{path}: {account.name} cannot open it ({'rw' if want & W else 'r'})"
        return None
    mode = os.R_OK | (os.W_OK if want & W else 0)
    return None if os.access(path, mode) else f"{path} is not accessible"


def _gstreamer(name: str) -> Check:
    import cv2

    if "GStreamer:                   YES" not in cv2.getBuildInformation():
        return Check(
            name, False, "this OpenCV build has no GStreamer backend (see docs/cameras.md)"
        )
    return Check(name, True, "GStreamer pipeline: OpenCV has GStreamer (not started here)")
