"""Decodes run in a child process that can be killed: a CPU deadline per decode.

The header checks of :mod:`.limits` bound what a decode may allocate, not how long it
runs: a JPEG within every bound can still take seconds of CPU, and a decoder bug on a
hostile file could crash the process. A decode whose header says it will allocate
``isolate_decodes_over`` bytes or more therefore runs in a decoder process of its own (one
per calling thread, started on first use and kept), watched from the calling thread:

- past ``decode_deadline`` seconds of the child's CPU (read from ``/proc``; wall-clock time
  where that cannot be read), the child is killed and the member refused with a
  :class:`~.errors.DecodeError` saying so;
- a child that dies (a crash, the kernel's OOM killer) refuses the member the same way;
- either way the next isolated decode starts a fresh child.

Small decodes stay in-process: sending them to a child would cost more than the decode
(handing over a decoded array costs about 2 ms per MB). ``decode_deadline=None`` turns
isolation off; the agent's configuration sets both (``limits.decode_deadline``,
``limits.isolate_decodes_over``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .errors import DecodeError
from .limits import DecodeLimits

T = TypeVar("T")
log = logging.getLogger(__name__)

_HEADER = struct.Struct("<Q")
_WALL_FACTOR = 4.0
"""A child may run this many deadlines of wall-clock time (a loaded board) before it is
killed even if its CPU time is still under the deadline."""
_PIPE_BYTES = 1 << 20
_START_TIMEOUT = 60.0
"""Seconds a new decoder process may take to import its decoders."""
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def isolated(limits: DecodeLimits, cost: int) -> bool:
    """Whether a decode of ``cost`` bytes runs in a decoder process under ``limits``."""
    over = limits.isolate_decodes_over
    return limits.decode_deadline is not None and over is not None and cost >= over


def run_decode(
    fn: Callable[..., T], args: tuple[Any, ...], *, member: str, limits: DecodeLimits, cost: int
) -> T:
    """``fn(*args)``, in a killable decoder process when :func:`isolated` says so.

    ``fn`` must be a module-level function (the child imports it by name) and its
    arguments and result picklable.
    """
    if not isolated(limits, cost):
        return fn(*args)
    assert limits.decode_deadline is not None
    try:
        child = _child()
    except OSError as exc:  # no process could be started: decode here, without a deadline
        _warn_once(exc)
        return fn(*args)
    return child.call(fn, args, member, limits.decode_deadline)


_warned = threading.Event()


def _warn_once(exc: OSError) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning("decoding in-process, without limits.decode_deadline: %s", exc)


class DecoderProcess:
    """One decoder child process: requests in on its stdin, results out on its stdout."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        """The process that started it: a forked process (a DataLoader worker) starts its own."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.decode.isolation_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        _widen(self.proc.stdin)
        _widen(self.proc.stdout)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait for the child's imports (not counted against any decode's deadline)."""
        stdout = self.proc.stdout
        assert stdout is not None
        ready = _readable(stdout, _START_TIMEOUT)
        line = stdout.readline() if ready else b""
        if line != b"ready\n":
            self.kill()
            raise OSError(f"the decoder process did not start ({self._death()})")

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], member: str, deadline: float) -> T:
        """Run ``fn(*args)`` in the child within ``deadline`` seconds of its CPU."""
        request = pickle.dumps((fn.__module__, fn.__qualname__, args), pickle.HIGHEST_PROTOCOL)
        try:
            self._send(request)
            start = self.cpu_seconds()
            self._wait(member, deadline, start)
            status, value = self._receive(member)
        except BaseException:
            self.kill()
            raise
        if status == "decode_error":
            raise DecodeError(member, value)
        if status == "error":
            raise DecodeError(member, f"decoder failed: {value}")
        return cast(T, value)

    def _send(self, payload: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(_HEADER.pack(len(payload)))
        stdin.write(payload)
        stdin.flush()

    def _wait(self, member: str, deadline: float, cpu_start: float | None) -> None:
        """Return once the child's answer is ready; kill it past the deadline."""
        stdout = self.proc.stdout
        assert stdout is not None
        t0 = time.monotonic()
        while True:
            ready = _readable(stdout, min(0.05 + deadline / 20, 0.5))
            if ready:
                return
            wall = time.monotonic() - t0
            cpu_now = self.cpu_seconds()
            used = wall if cpu_start is None or cpu_now is None else cpu_now - cpu_start
            if used > deadline or wall > _WALL_FACTOR * deadline + 5.0:
                self.kill()
                raise DecodeError(
                    member,
                    f"decoding took more than {deadline:g} s of CPU (limits.decode_deadline); "
                    "abandoned",
                )

    def _receive(self, member: str) -> Any:
        """The child's answer: a pickle, its arrays' bytes read straight into place."""
        meta = self._read_exactly(self._read_size(member), member)
        count = self._read_size(member)
        buffers = [self._read_exactly(self._read_size(member), member) for _ in range(count)]
        return pickle.loads(meta, buffers=buffers)

    def _read_size(self, member: str) -> int:
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size, member))
        return int(size)

    def _read_exactly(self, size: int, member: str) -> bytearray:
        stdout = cast(io.BufferedReader, self.proc.stdout)
        body = bytearray(size)
        view, got = memoryview(body), 0
        while got < size:
            n = stdout.readinto(view[got:])
            if not n:
                raise DecodeError(member, f"the decoder process died ({self._death()})")
            got += n
        return body

    def _death(self) -> str:
        code = self.proc.wait(timeout=5)
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"

    def cpu_seconds(self) -> float | None:
        """The child's user + system CPU seconds so far; ``None`` where unknown."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / _TICKS

    def alive(self) -> bool:
        """Whether the child is still running."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill the child and reap it (the next isolated decode starts another)."""
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def _readable(stream: Any, timeout: float) -> bool:
    """Whether ``stream`` has bytes to read within ``timeout`` seconds (any descriptor number)."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def _widen(stream: Any) -> None:
    """A 1-MiB pipe where Linux allows it (fewer wake-ups per megabyte handed over)."""
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except (OSError, ImportError, AttributeError):
        pass


_local = threading.local()


def _child() -> DecoderProcess:
    """This thread's decoder process, started if there is none or it has gone."""
    child: DecoderProcess | None = getattr(_local, "child", None)
    if child is None or child.owner != os.getpid() or not child.alive():
        child = DecoderProcess()
        _local.child = child
    return child
