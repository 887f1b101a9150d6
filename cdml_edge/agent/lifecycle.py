"""What happens to a source file after its window: ``delete | move | keep``, or quarantine.

:meth:`FileLifecycle.finish` is called only once the output has accepted the window's
results (``on_durable``) and retention has kept the window where it is on, so a crash
before that leaves the file in place (at-least-once delivery).

:meth:`FileLifecycle.quarantine` moves a bad input into ``quarantine/<source>/`` (for a
camera frame, which has no file, its bytes are written there). The quarantine folder is
byte-bounded: above ``max_bytes`` the oldest quarantined files are deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Literal

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import unique_name

log = logging.getLogger(__name__)

OnDone = Literal["delete", "move", "keep"]


class LifecycleError(CdmlError, OSError):
    """A source file that could not be deleted, moved or quarantined; names the file."""


def move_file(src: Path, folder: Path, name: str | None = None) -> Path:
    """Move ``src`` into ``folder`` (same file system: one rename) without overwriting."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = unique_name(folder, name or src.name)
    try:
        os.replace(src, dest)
    except OSError as exc:
        if exc.errno != 18:  # EXDEV: other file system, copy then delete
            raise
        shutil.move(str(src), str(dest))
    return dest


class FileLifecycle:
    """Applies ``on_done`` and quarantines bad inputs (thread-safe)."""

    def __init__(self, quarantine_dir: Path, quarantine_max_bytes: int) -> None:
        self.quarantine_dir = quarantine_dir
        self.quarantine_max_bytes = quarantine_max_bytes
        self._lock = threading.Lock()
        self.deleted = 0
        self.moved = 0
        self.quarantined = 0
        self.quarantine_bytes_written = 0
        self.failures = 0

    def finish(self, path: Path, on_done: OnDone, move_to: Path | None = None) -> Path | None:
        """Delete, move or keep one finished source file; returns its new path when moved.

        A file that is gone already counts as done (another run finished it).
        """
        try:
            if on_done == "delete":
                path.unlink(missing_ok=True)
                self.deleted += 1
                return None
            if on_done == "move":
                if move_to is None:
                    raise LifecycleError(f"{path}: on_done 'move' without move_to")
                if not path.exists():
                    return None
                dest = move_file(path, move_to)
                self.moved += 1
                return dest
            return path
        except OSError as exc:
            self.failures += 1
            log.warning("%s: on_done %s failed: %s", path, on_done, exc)
            return None

    def quarantine(
        self, source: str, name: str, path: Path | None, data: bytes | None = None
    ) -> Path | None:
        """Move a bad input (or write a frame's bytes) to ``quarantine/<source>/``."""
        folder = self.quarantine_dir / source
        flat = name.replace(os.sep, "_")
        try:
            with self._lock:
                if path is not None:
                    if not path.exists():
                        return None
                    size = path.stat().st_size
                    dest = move_file(path, folder, flat)
                elif data is not None:
                    folder.mkdir(parents=True, exist_ok=True)
                    dest = unique_name(folder, flat)
                    dest.write_bytes(data)
                    size = len(data)
                    self.quarantine_bytes_written += size
                else:
                    return None
                self.quarantined += 1
                self._enforce_bound()
            log.warning("quarantined %s/%s -> %s (%d bytes)", source, name, dest, size)
            return dest
        except OSError as exc:
            self.failures += 1
            log.warning("%s/%s: quarantine failed: %s", source, name, exc)
            return None

    def _enforce_bound(self) -> None:
        """Full policy: delete the oldest quarantined files above ``max_bytes``."""
        files: list[tuple[float, int, Path]] = []
        total = 0
        for p in self.quarantine_dir.rglob("*"):
            try:
                st = p.stat()
            except OSError:
                continue
            if p.is_file():
                files.append((st.st_mtime, st.st_size, p))
                total += st.st_size
        if total <= self.quarantine_max_bytes:
            return
        files.sort()
        for _, size, p in files:
            if total <= self.quarantine_max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size
            log.info("quarantine over %d bytes: removed %s", self.quarantine_max_bytes, p)


def age_s(path: Path) -> float:
    """Seconds since ``path`` was last modified (``inf`` if it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")
