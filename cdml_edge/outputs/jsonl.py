"""An :class:`~cdml_edge.outputs.base.Output` that writes JSON lines to a file or stdout.

One line per message: ``{"topic": "<prefix>/<device>/<rel>", "retain": false, "payload": {...}}``.
A batch is written, flushed and (for a file) fsynced before ``on_durable`` is called, so
source files are only deleted or moved once their results are on disk. Writes are
synchronous: nothing queues here. Full policy: the file is rotated to ``<path>.1`` when it
grows past ``max_bytes`` (one old generation kept), so it stays byte-bounded.

Every line in the file is whole. A batch goes down in one unbuffered write; when the disk
refuses part of it (full: ENOSPC) the file is cut back to where the batch began, the batch
is refused (``OSError``) and nothing of it stays behind to be written later. A line torn by
a killed writer (kill -9, a power cut) is cut off when the file is opened again, before the
next line goes after it: its batch was never durable, so its results come again. A file
moved away or deleted (logrotate) is followed by a new one at ``path``.

Stdout (``path='-'``) is not the output's alone (``> f 2>&1`` puts stderr's log lines in the
same file): it is never cut back. A line a refused write left part-written there is ended
with a newline and counted (``torn_lines``); its batch is refused and written again later.

Written to stdout, a reader that went away (``| head -1``: ``EPIPE``) is
for good: the batch and every later one are refused with :class:`StdoutClosed`, without
another write, so whoever runs the output can stop instead of retrying.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from cdml_edge.window.topics import OutMessage, topic_base

log = logging.getLogger(__name__)


def _line(m: OutMessage, base: str) -> str:
    payload = json.loads(m.payload) if m.payload else None
    record = {"topic": base + m.topic, "retain": m.retain, "payload": payload}
    return json.dumps(record, separators=(",", ":")) + "\n"


def format_line(m: OutMessage, topic_prefix: str, device: str) -> str:
    """One message as the JSON line this output writes (newline included)."""
    return _line(m, topic_base(topic_prefix, device))


STDOUT_CLOSED = "stdout is closed: nothing takes the results; stopping"
"""The one line an agent logs when it stops because of :class:`StdoutClosed`."""

_stopping = threading.Lock()


class StdoutClosed(BrokenPipeError):
    """Stdout's reader went away (``EPIPE``): nothing will take a line written there again."""


def stop_for_closed_stdout(stopped: threading.Event) -> None:
    """Log :data:`STDOUT_CLOSED` and set ``stopped``, unless it is set already.

    Whoever first meets :class:`StdoutClosed` (a pipeline worker, the health loop) stops
    the agent with it, as SIGTERM does; later ones, or those during a stop, say nothing.
    """
    with _stopping:
        if stopped.is_set():
            return
        log.error("%s", STDOUT_CLOSED)
        stopped.set()


class JsonlOutput:
    """JSON-lines output; ``path='-'`` writes to stdout."""

    def __init__(
        self,
        path: str | Path,
        *,
        topic_prefix: str = "cdml",
        device: str = "edge-1",
        fsync: bool = True,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.path = str(path)
        self._prefix = topic_base(topic_prefix, device)
        self._fsync = fsync and self.path != "-"
        self._max_bytes = max_bytes
        self._fd: int | None = None
        self._stdout = False
        self._lock = threading.Lock()
        self._size = 0  # of the current file, for rotation
        self._written = 0  # bytes this output wrote since it started
        self._messages = 0
        self._batches = 0
        self._failed = 0
        self._degraded: str | None = None
        self._rotate_warned = False
        self._reopen_warned = False
        self._reopen_failed = 0  # batches written on in a file the path no longer names
        self._stdout_closed = False
        self._torn_lines = 0  # stdout: lines a refused write left part-written
        self._line_open = False  # stdout: the last of them is not ended yet

    @property
    def degraded(self) -> str | None:
        """Why the last batch could not be written (``None`` once one is).

        Else, while the path names no file it can make (moved away, a folder in its place):
        that the lines go on in the file it had open, and how many batches went there.
        """
        if self._degraded is None and self._reopen_warned:
            return (
                f"{self.path}: moved away and cannot be made again: writing on in the file "
                f"it was ({self._reopen_failed} batches so, this run)"
            )
        return self._degraded

    @property
    def stdout_closed(self) -> bool:
        """Whether this output writes to stdout and its reader went away (for good)."""
        return self._stdout_closed

    def start(self) -> None:
        """Open the file for appending (its folder made if needed); a second call does nothing.

        A torn last line (the writer was killed in the middle of it) is cut off first.
        """
        with self._lock:
            if self._fd is not None or self._stdout:
                return
            if self.path == "-":
                self._stdout = True
                return
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._fd = self._open()
            self._size = _cut_torn_tail(self._fd, self.path)

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Write, flush and (for a file) fsync ``messages``, then call ``on_durable``.

        Raises ``RuntimeError`` before :meth:`start`; an ``OSError`` is counted and raised,
        and leaves nothing of the batch in the file. Once stdout's reader went away every
        batch raises :class:`StdoutClosed`.
        """
        data = "".join(_line(m, self._prefix) for m in messages).encode()
        with self._lock:
            if self._stdout:
                self._write_stdout_locked(data, len(messages))
            elif self._fd is None:
                raise RuntimeError(f"{self.path}: output not started")
            else:
                self._write_locked(*self._current_fd_locked(), data, len(messages))
            self._written += len(data)
            self._messages += len(messages)
            self._batches += 1
            self._degraded = None
            if not self._stdout and self._size > self._max_bytes:
                self._rotate_locked()
        if on_durable is not None:
            on_durable()

    def _write_stdout_locked(self, data: bytes, count: int) -> None:
        if self._stdout_closed:
            self._failed += count
            raise StdoutClosed(errno.EPIPE, "stdout is closed")
        try:
            self._to_stdout(data)
        except OSError as exc:  # a closed pipe, a full disk under a redirection
            self._failed += count
            self._degraded = f"stdout: {exc.strerror or exc}: {count} messages not written"
            if exc.errno != errno.EPIPE:
                raise
            self._stdout_closed = True
            self._degraded = "stdout is closed: nothing takes the results"
            raise StdoutClosed(errno.EPIPE, "stdout is closed") from exc

    def _to_stdout(self, data: bytes) -> None:
        """``data`` on stdout, all of it or ``OSError``.

        Written to its file descriptor: Python's buffered stdout takes a short write (a full
        disk under a redirection) as a success and loses the rest, tearing a line. Stdout is
        never cut back (``> f 2>&1`` puts stderr's log lines, written meanwhile, in the same
        file): a line a refused write left part-written is ended with a newline and counted
        (``torn_lines``); when even that is refused, the next write starts with it. A pipe
        takes all or blocks. A stdout without a descriptor (replaced) is written as text.
        """
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation among them
            sys.stdout.write(data.decode())
            sys.stdout.flush()
            return
        sys.stdout.flush()  # what others printed goes first
        if self._line_open:
            data = b"\n" + data
        written, error = _write_until_error(fd, data, "<stdout>")
        if written:
            self._line_open = data[written - 1 : written] != b"\n"
        if error is None:
            return
        if written and self._line_open:  # this write tore a line
            self._torn_lines += 1
            log.warning(
                "stdout: a line left part-written by a refused write (%s) is ended there; "
                "its window is written again later",
                error,
            )
        if self._line_open:
            self._line_open = not _end_line(fd)
        raise error

    def _current_fd_locked(self) -> tuple[int, int]:
        """The open file and its size, or a new one when ``path`` no longer names it.

        Moved away (logrotate's ``create``) or deleted: the lines go to a new file at
        ``path``, not after the old one's.
        """
        assert self._fd is not None
        mine = os.fstat(self._fd)
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                self._reopen_warned = False  # the path names this file again
                return self._fd, mine.st_size
        except FileNotFoundError:
            pass
        except OSError:  # cannot tell: write on where it writes
            return self._fd, mine.st_size
        try:
            fd = self._open()
        except OSError as exc:  # its folder gone too, a folder in its place: the old file
            self._reopen_failed += 1
            if not self._reopen_warned:  # once until the path names a file again
                log.warning(
                    "%s: moved away and cannot be made again (%s); writing on in the file "
                    "it was (said once until it can)",
                    self.path,
                    exc,
                )
                self._reopen_warned = True
            return self._fd, mine.st_size
        self._reopen_warned = False
        log.info("%s: moved away or deleted; writing to a new file", self.path)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = fd
        self._size = _cut_torn_tail(fd, self.path)
        return fd, self._size

    def _write_locked(self, fd: int, begin: int, data: bytes, count: int) -> None:
        """All of ``data`` on disk (fsynced when asked), or none of it and ``OSError``.

        ``begin``: the file's size before (what an error cuts it back to).
        """
        try:
            _write_all(fd, data, self.path)
            if self._fsync:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # what fitted of the batch goes again
                os.ftruncate(fd, begin)
            self._failed += count
            self._degraded = f"{self.path}: {exc.strerror or exc}: {count} messages not written"
            raise
        self._size = begin + len(data)

    def _rotate_locked(self) -> None:
        """``<path>`` becomes ``<path>.1``; a fresh ``<path>`` follows. A failure is logged."""
        assert self._fd is not None
        try:
            os.replace(self.path, self.path + ".1")
            fd = self._open()
        except OSError as exc:  # the batch is written: keep writing to the current file
            if not self._rotate_warned:
                log.warning("%s: not rotated (%s); writing on in it", self.path, exc)
                self._rotate_warned = True
            return
        os.close(self._fd)
        self._fd = fd
        self._size = 0
        self._rotate_warned = False

    def stats(self) -> dict[str, int]:
        """Messages, batches, bytes written since start (all files) and messages failed.

        ``reopen_failed``: the batches written on in the file it had open, its path moved
        away and no new file to be made there (a folder in its place, its folder gone).
        ``torn_lines``: lines on stdout a refused write left part-written (ended there).
        """
        return {
            "messages": self._messages,
            "batches": self._batches,
            "bytes_written": self._written,
            "failed": self._failed,
            "reopen_failed": self._reopen_failed,
            "torn_lines": self._torn_lines,
        }

    def stop(self, timeout: float = 5.0) -> None:
        """Close the file (stdout stays open); ``timeout`` is unused, writes are synchronous."""
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = None
            self._stdout = False


def _write_all(fd: int, data: bytes, name: str) -> None:
    """Every byte of ``data`` to ``fd``, or ``OSError`` (a write that takes nothing too)."""
    _written, error = _write_until_error(fd, data, name)
    if error is not None:
        raise error


def _write_until_error(fd: int, data: bytes, name: str) -> tuple[int, OSError | None]:
    """Write ``data`` to ``fd`` until done or refused: the bytes written, and the error."""
    view = memoryview(data)
    written = 0
    try:
        while view:
            n = os.write(fd, view)
            if n == 0:  # nothing taken, no error: as good as full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
            view = view[n:]
            written += n
    except OSError as exc:
        return written, exc
    return written, None


def _end_line(fd: int) -> bool:
    """A newline on ``fd``; whether it was taken."""
    try:
        return os.write(fd, b"\n") == 1
    except OSError:
        return False


def _cut_torn_tail(fd: int, path: str, chunk: int = 64 * 1024) -> int:
    """Cut the file after its last newline, if it does not end with one; its new size."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    keep = 0
    while end > 0:
        begin = max(0, end - chunk)
        block = os.pread(fd, end - begin, begin)
        nl = block.rfind(b"\n")
        if nl >= 0:
            keep = begin + nl + 1
            break
        end = begin
    os.ftruncate(fd, keep)
    log.warning(
        "%s: cut a torn last line (%d bytes, left by a writer that was stopped in the middle "
        "of it); its results are sent again",
        path,
        size - keep,
    )
    return keep
