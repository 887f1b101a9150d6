"""What every source shares: the sinks it feeds, its counters and its typed errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.errors import CdmlError
from cdml_edge.window.items import Item

ItemSink = Callable[[Item], None]
ErrorSink = Callable[[str, str | None, Exception, Path | None], None]
"""``(source, item name, error, path)`` — called for an item that could not be taken."""


class SourceError(CdmlError):
    """An input that cannot be taken (vanished, unreadable); names the file."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


class FileTooLarge(SourceError):
    """A file bigger than one window or the in-flight budget may hold; never read."""

    def __init__(self, path: Path | str, size: int, limit: int) -> None:
        super().__init__(path, f"too large: {size} bytes, limit {limit}")
        self.size = size
        self.limit = limit


@dataclass
class SourceStats:
    taken: int = 0
    taken_bytes: int = 0
    skipped: int = 0  # camera frames refused by the budget
    paused: int = 0  # scans that left a complete file on disk because the budget was full
    errors: int = 0
