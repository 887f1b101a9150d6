"""What a folder source under test hands its items and errors to: kept, for the test to read."""

from __future__ import annotations

import threading
from pathlib import Path

from cdml_edge.window.items import Item


class Sink:
    """The items a source took and the errors it reported, in order, safe across threads."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.errors: list[tuple[str, str | None, Exception, Path | None]] = []
        self._lock = threading.Lock()

    def __call__(self, item: Item) -> None:
        with self._lock:
            self.items.append(item)

    def error(self, source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        with self._lock:
            self.errors.append((source, name, exc, path))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(i.name for i in self.items)

    def has(self, name: str) -> bool:
        return name in self.names()
