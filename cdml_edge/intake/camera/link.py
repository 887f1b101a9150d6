"""The agent's end of a capture process: start it, read its messages with a deadline, kill it."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import selectors
import subprocess
import sys
import time

from cdml_edge.intake.camera import protocol
from cdml_edge.intake.camera.settings import CaptureSettings, redact_text

EXITED = b"-"
"""Pseudo message kind: the process closed its stdout (it exited or crashed)."""

STDERR_LINES = 20
"""Lines of the child's stderr kept (each cut to 300 characters, cleaned of the URL's
secrets: OpenCV's debug log names the URL it opens) to explain a failure."""

_FFMPEG_CONTEXT = re.compile(r"^\[([^\]@]+?) @ 0x[0-9a-fA-F]+\]\s*")
"""FFmpeg's log prefix ``[demuxer @ 0x55d0...]``: its address differs on each attempt."""
_OPENCV_PREFIX = re.compile(r"^\[\s*([A-Z]+):\d+@[\d.]+\]\s*")
"""OpenCV's log prefix ``[ WARN:0@0.010]``: its clock differs on each attempt."""

DRAIN_S = 1.0
"""How long a failed capture's last stderr lines are waited for (it exits right after)."""


def failure_detail(tail: list[str]) -> str | None:
    """The last non-blank line of a capture's stderr ``tail``, as a failure's detail.

    FFmpeg's ``[mov,mp4,... @ 0x55d0...] moov atom not found`` becomes
    ``mov,mp4,...: moov atom not found``, OpenCV's ``[ WARN:0@0.010] ...`` ``WARN: ...``
    (both prefixes change on each attempt). The lines are already cleaned of the URL's secrets
    (:meth:`CaptureProcess.stderr_tail`).
    """
    for line in reversed(tail):
        text = line.strip()
        if text:
            text = _OPENCV_PREFIX.sub(lambda m: f"{m.group(1)}: ", text, count=1)
            return _FFMPEG_CONTEXT.sub(lambda m: f"{m.group(1).strip()}: ", text, count=1)
    return None


class CaptureProcess:
    """One capture child (``python -m cdml_edge.intake.camera.worker``).

    :meth:`next_message` waits at most ``timeout`` seconds and never blocks on the child, so
    a camera whose driver hangs inside OpenCV cannot hang the thread that reads it; such a
    child is killed (SIGKILL) by :meth:`close`. What sits between them is bounded: the
    kernel pipe (the child blocks writing when the agent does not read) and one partial
    message here (at most :data:`~.protocol.MAX_PAYLOAD`).
    """

    def __init__(self, settings: CaptureSettings, python: str = sys.executable) -> None:
        env = dict(os.environ)
        env.setdefault("OPENCV_LOG_LEVEL", "ERROR")
        self._proc = subprocess.Popen(
            [python, "-m", "cdml_edge.intake.camera.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a Ctrl-C on the terminal is the agent's to handle
        )
        assert self._proc.stdin and self._proc.stdout and self._proc.stderr
        try:  # the URL goes over stdin, not argv: camera passwords stay out of `ps`
            self._proc.stdin.write(settings.to_json().encode() + b"\n")
            self._proc.stdin.close()
        except OSError:  # the child died at once: reap it, say so
            self._proc.kill()
            self._proc.wait()
            self._proc.stdout.close()
            self._proc.stderr.close()
            raise
        self._out = self._proc.stdout.fileno()
        self._err = self._proc.stderr.fileno()
        os.set_blocking(self._out, False)
        os.set_blocking(self._err, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._out, selectors.EVENT_READ)
        self._sel.register(self._err, selectors.EVENT_READ)
        self._decoder = protocol.MessageDecoder()
        self._ready: collections.deque[protocol.Message] = collections.deque()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._err_partial = b""
        self._eof = False
        self._url = settings.url

    @property
    def pid(self) -> int:
        """The capture process's pid."""
        return self._proc.pid

    def next_message(self, timeout: float) -> protocol.Message | None:
        """The next message, or ``None`` when none came within ``timeout`` seconds.

        After the child closed its stdout, returns one ``EXITED`` message (its payload the
        exit status, when known) and then the same again. Raises
        :class:`~.protocol.ProtocolError` on garbage.
        """
        end = time.monotonic() + timeout
        while not self._ready:
            if self._eof:
                return protocol.Message(EXITED, 0, str(self._returncode()).encode())
            remaining = end - time.monotonic()
            if remaining <= 0:
                return None
            for key, _ in self._sel.select(remaining):
                if key.fd == self._out:
                    self._read_out()
                else:
                    self._read_err()
        return self._ready.popleft()

    def _read(self, fd: int, size: int) -> bytes | None:
        """What ``fd`` holds: ``b""`` at its end (then no longer watched), None if nothing."""
        try:
            data = os.read(fd, size)
        except BlockingIOError:
            return None
        if not data:
            self._sel.unregister(fd)
        return data

    def _read_out(self) -> None:
        data = self._read(self._out, 1 << 20)
        if data == b"":
            self._eof = True
        elif data:
            self._ready.extend(self._decoder.feed(data))

    def _read_err(self) -> None:
        data = self._read(self._err, 1 << 16)
        if not data:
            return
        *lines, self._err_partial = (self._err_partial + data).split(b"\n")
        self._err_partial = self._err_partial[-300:]
        for line in lines:
            text = redact_text(line.decode("utf-8", "replace").strip(), self._url)
            if text:
                self._stderr.append(text[:300])

    def _returncode(self) -> int | None:
        try:
            return self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return None

    def drain_stderr(self, timeout: float = DRAIN_S) -> None:
        """Read what the child still writes to stderr until it closes it, or ``timeout``.

        A failure message can arrive before the stderr lines that explain it have been read.
        """
        end = time.monotonic() + timeout
        while self._err in self._sel.get_map() and (left := end - time.monotonic()) > 0:
            for key, _ in self._sel.select(left):
                if key.fd == self._err:
                    self._read_err()
                else:
                    self._read_out()

    def stderr_tail(self) -> list[str]:
        """The last lines the child wrote to stderr (OpenCV / FFmpeg warnings)."""
        return list(self._stderr)

    def close(self) -> None:
        """Kill the child (if still running), reap it and close the pipes."""
        if self._proc.poll() is None:
            self._proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # D state in a driver: leave it
            self._proc.wait(timeout=5.0)
        self._sel.close()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
