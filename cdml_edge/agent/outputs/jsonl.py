"""An :class:`~cdml_edge.agent.outputs.base.Output` that writes JSON lines to a file or stdout.

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

from cdml_edge.window.payloads import OutMessage


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
        self._prefix = f"{topic_prefix.strip('/')}/{device}/" if topic_prefix else f"{device}/"
        self._fsync = fsync and self.path != "-"
        self._max_bytes = max_bytes
        self._fh: IO[str] | None = None
        self._lock = threading.Lock()
        self._written = 0
        self._messages = 0
        self._batches = 0
        self._failed = 0

    def start(self) -> None:
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
        self, messages: Sequence[OutMessage], on_durable: Callable[[], None] | None = None
    ) -> None:
        lines = []
        for m in messages:
            payload = json.loads(m.payload) if m.payload else None
            lines.append(
                json.dumps(
                    {"topic": self._prefix + m.topic, "retain": m.retain, "payload": payload},
                    separators=(",", ":"),
                )
                + "\n"
            )
        text = "".join(lines)
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
        return {
            "messages": self._messages,
            "batches": self._batches,
            "bytes_written": self._written,
            "failed": self._failed,
        }

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            if self._fh is not None and self._fh is not sys.stdout:
                self._fh.close()
            self._fh = None
