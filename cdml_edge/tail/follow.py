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
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    """Feed the lines of ``path`` (recent ones first, then new ones) until ``stop``."""
    fh = None
    ident: tuple[int, int] | None = None
    pending = b""
    while not stop.is_set():
        if fh is None:
            try:
                fh = open(path, "rb")  # noqa: SIM115 - kept open while following
            except FileNotFoundError:
                stop.wait(POLL_S)
                continue
            st = os.fstat(fh.fileno())
            first = ident is None
            ident = (st.st_dev, st.st_ino)
            if first and st.st_size > BACKLOG_BYTES:
                fh.seek(st.st_size - BACKLOG_BYTES)
                fh.readline()  # a partial line
        chunk = fh.read(65536)
        if chunk:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line.strip():
                    _feed_line(line, base, sink)
            if len(pending) > MAX_LINE_BYTES:  # its rest is no JSON line: skipped
                pending = b""
            continue
        if _rotated(path, ident, fh.tell()):
            fh.close()
            fh, pending = None, b""
            continue
        stop.wait(POLL_S)
    if fh is not None:
        fh.close()


def _rotated(path: Path, ident: tuple[int, int] | None, pos: int) -> bool:
    """Whether ``path`` is now another file, or shorter than where we are."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) != ident or st.st_size < pos
