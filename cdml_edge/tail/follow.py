"""Where ``cdml-edge tail`` reads an appliance's ``output.jsonl`` (its broker: ``broker``).

Both feed ``(topic kind, source, payload)`` to a callback until a stop event is set.
Following a file starts at most ``BACKLOG_BYTES`` before its end (what was recent), reads
lines as they are appended and reopens the file when the output rotates it (``<path>.1``).
A line longer than ``MAX_LINE_BYTES`` is skipped, not gathered: what is held is bounded.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from cdml_edge.window.topics import split_topic

log = logging.getLogger(__name__)

BACKLOG_BYTES = 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
POLL_S = 0.2

Sink = Callable[[str, "str | None", Any], None]
"""Takes ``(kind, source, payload)``: ``("result", "cam", {...})``, ``("health", None, ...)``.

The payload is what the message held: a JSON object from the appliance, or anything else
(``None``: not readable) from a broker anyone may publish on.
"""


def parse_topic(topic: str, base: str) -> tuple[str, str | None] | None:
    """``(kind, source)`` of a full topic under ``base`` (``{prefix}/{device}/``), else ``None``."""
    if not topic.startswith(base):
        return None
    return split_topic(topic[len(base) :])


def _feed_line(line: bytes, base: str, sink: Sink) -> bool:
    """One JSON line of ``output.jsonl`` into ``sink``; ``False`` if it is not one."""
    try:
        record = json.loads(line)
        parsed = parse_topic(record["topic"], base)
        if parsed is None or not isinstance(record.get("payload"), dict):
            return False
    except (ValueError, KeyError, TypeError, AttributeError):  # not a record of ours
        return False
    return shown(sink, parsed[0], parsed[1], record["payload"])


def shown(sink: Sink, kind: str, source: str | None, payload: Any) -> bool:
    """``sink(kind, source, payload)``; ``False`` when it raised, which never ends a follow.

    The first such failure is a warning (a fault of the view, named with its traceback),
    later ones are debug lines: one bad message must neither stop ``tail`` nor flood it.
    """
    global _failed_before
    try:
        sink(kind, source, payload)
    except Exception:  # noqa: BLE001 - reported below; the follow goes on
        level = logging.DEBUG if _failed_before else logging.WARNING
        _failed_before = True
        log.log(level, "tail: a %s message could not be shown", kind, exc_info=True)
        return False
    return True


_failed_before = False


def follow_jsonl(path: Path, base: str, sink: Sink, stop: threading.Event) -> None:
    """Feed the lines of ``path`` (recent ones first, then new ones) until ``stop``.

    A file cut back at the end of a line already read (the output undoing a batch it could
    not write, or a line torn by a kill) is followed from the cut; a file replaced, rotated
    or cut anywhere else is read again from its start.
    """
    fh = None
    ident: tuple[int, int] | None = None
    pending = b""
    recent = _RecentLines()
    while not stop.is_set():
        if fh is None:
            fh = _open_regular(path)
            if fh is None:  # not there yet, or not a file (a FIFO is never waited on)
                stop.wait(POLL_S)
                continue
            st = os.fstat(fh.fileno())
            first = ident is None
            ident = (st.st_dev, st.st_ino)
            recent = _RecentLines()
            if first and st.st_size > BACKLOG_BYTES:
                fh.seek(st.st_size - BACKLOG_BYTES)
                fh.readline()  # a partial line
        chunk = fh.read(65536)
        if chunk:
            start = fh.tell() - len(chunk) - len(pending)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                recent.note(start, line)
                start += len(line) + 1
                if line.strip():
                    _feed_line(line, base, sink)
            if len(pending) > MAX_LINE_BYTES:  # its rest is no JSON line: skipped
                pending = b""
            continue
        size = _changed_size(path, ident, fh.tell())
        if size is not None and recent.cut_at(fh, size):
            fh.seek(size)
            pending = b""
        elif size is not None:
            fh.close()
            fh, pending = None, b""
        else:
            stop.wait(POLL_S)
    if fh is not None:
        fh.close()


def _open_regular(path: Path) -> BinaryIO | None:
    """``path`` opened for reading when it is a regular file, else ``None``.

    Opened without blocking, so a named pipe put at the path is not waited on.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


RECENT_LINES = 256
"""Lines whose place is remembered, to tell a file cut back after one of them."""


class _RecentLines:
    """Where the last lines read begin and end, and their CRCs."""

    def __init__(self) -> None:
        self._lines: deque[tuple[int, int, int]] = deque(maxlen=RECENT_LINES)

    def note(self, start: int, line: bytes) -> None:
        """``line`` (without its newline) was read from ``start``."""
        self._lines.append((start, start + len(line) + 1, zlib.crc32(line)))

    def cut_at(self, fh: BinaryIO, size: int) -> bool:
        """The file, now ``size`` bytes, ends with a line read before, unchanged."""
        if size <= 0:
            return False
        for start, end, crc in reversed(self._lines):
            if end == size:
                fh.seek(start)
                data = fh.read(end - start)
                return data.endswith(b"\n") and zlib.crc32(data[:-1]) == crc
            if end < size:
                return False
        return False


def _changed_size(path: Path, ident: tuple[int, int] | None, pos: int) -> int | None:
    """The size of ``path`` when it is now another file (-1) or shorter than ``pos``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if (st.st_dev, st.st_ino) != ident:
        return -1
    return st.st_size if st.st_size < pos else None
