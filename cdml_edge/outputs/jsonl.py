"""An :class:`~cdml_edge.outputs.base.Output` that writes JSON lines to a file or stdout.

One line per message: ``{"topic": "<prefix>/<device>/<rel>", "retain": false, "payload": {...}}``.
A batch is written, flushed and (for a file) fsynced before ``on_durable`` is called, so
source files are only deleted or moved once their results are on disk. Writes are
synchronous: nothing queues here. Full policy: the file is rotated to ``<path>.1`` when it
grows past ``max_bytes`` (one old generation kept), so it stays byte-bounded.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from cdml_edge.window.topics import OutMessage, topic_base


def _line(m: OutMessage, base: str) -> str:
    payload = json.loads(m.payload) if m.payload else None
    record = {"topic": base + m.topic, "retain": m.retain, "payload": payload}
    return json.dumps(record, separators=(",", ":")) + "\n"


def format_line(m: OutMessage, topic_prefix: str, device: str) -> str:
    """One message as the JSON line this output writes (newline included)."""
    return _line(m, topic_base(topic_prefix, device))


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
        self._fh: IO[str] | None = None
        self._lock = threading.Lock()
        self._written = 0
        self._messages = 0
        self._batches = 0
        self._failed = 0

    def start(self) -> None:
        """Open the file for appending (its folder made if needed); a second call does nothing."""
        with self._lock:
            if self._fh is not None:
                return
            if self.path == "-":
                self._fh = sys.stdout
            else:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
                self._written = self._fh.tell()

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Write, flush and (for a file) fsync ``messages``, then call ``on_durable``.

        Raises ``RuntimeError`` before :meth:`start`; an ``OSError`` is counted and raised.
        """
        text = "".join(_line(m, self._prefix) for m in messages)
        with self._lock:
            if self._fh is None:
                raise RuntimeError(f"{self.path}: output not started")
            try:
                self._fh.write(text)
                self._fh.flush()
                if self._fsync:
                    os.fsync(self._fh.fileno())
            except OSError:
                self._failed += len(messages)
                raise
            self._written += len(text.encode())
            self._messages += len(messages)
            self._batches += 1
            if self.path != "-" and self._written > self._max_bytes:
                self._rotate_locked()
        if on_durable is not None:
            on_durable()

    def _rotate_locked(self) -> None:
        assert self._fh is not None
        self._fh.close()
        os.replace(self.path, self.path + ".1")
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._written = 0

    def stats(self) -> dict[str, int]:
        """Messages, batches, bytes written to the current file and messages failed."""
        return {
            "messages": self._messages,
            "batches": self._batches,
            "bytes_written": self._written,
            "failed": self._failed,
        }

    def stop(self, timeout: float = 5.0) -> None:
        """Close the file (stdout stays open); ``timeout`` is unused, writes are synchronous."""
        with self._lock:
            if self._fh is not None and self._fh is not sys.stdout:
                self._fh.close()
            self._fh = None
