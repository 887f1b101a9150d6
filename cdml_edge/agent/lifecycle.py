"""What happens to a source file after its window: ``delete | move | keep``, or quarantine.

:meth:`FileLifecycle.finish` is called only once the output has accepted the window's
results (``on_durable``) and retention has kept the window where it is on, so a crash
before that leaves the file in place (at-least-once delivery). It acts only on the version
that was scored: the file at the path must still have the :class:`FileIdentity` the item
read (device, inode, size, mtime) and the content hash the manifest holds; a file replaced,
rewritten or turned into a link meanwhile is left for the next window and counted
(``changed``; ``on_skip("changed")``). A name taken in ``move_to`` or one too long gets a
unique name (:func:`~cdml_edge.fsio.unique_name`), never a stuck file.

:meth:`FileLifecycle.quarantine` moves a bad input into ``quarantine/<source>/`` under the
name its error event gives (for a camera frame, which has no file, its bytes are written
there). Quarantined files get ``file_mode`` (owner-only 0600 by default), the folders the
agent makes for them the same with ``x`` where ``r`` is set (0700). The quarantine folder
is byte-bounded: above ``max_bytes`` the oldest quarantined files are deleted.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import atomic_write, log_name, unique_name
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

OnDone = Literal["delete", "move", "keep"]
HASH_CHUNK = 1 << 20


class LifecycleError(CdmlError, OSError):
    """A source file that could not be deleted, moved or quarantined; names the file."""


def folder_mode(file_mode: int) -> int:
    """The mode of a folder holding files of ``file_mode``: ``x`` wherever ``r`` is set."""
    return file_mode | ((file_mode & 0o444) >> 2)


def make_folder(folder: Path, mode: int) -> None:
    """Make ``folder`` (and missing parents) with ``mode``; an existing one is left as it is."""
    if folder.is_dir():
        return
    make_folder(folder.parent, mode)
    try:
        folder.mkdir(mode=mode)
    except FileExistsError:
        return
    os.chmod(folder, mode)  # not narrowed by the umask


def move_file(src: Path, folder: Path, name: str | None = None) -> Path:
    """Move ``src`` into ``folder`` (same file system: one rename) without overwriting."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = unique_name(folder, name or src.name)
    try:
        os.replace(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # other file system: copy then delete
            raise
        shutil.move(str(src), str(dest))
    return dest


def still_scored(path: Path, identity: FileIdentity, sha256: str | None) -> bool | None:
    """Whether ``path`` is still the file that was scored; ``None`` when it is gone.

    Same identity (``lstat``: a link put in its place is not the file) and, when given, the
    same SHA-256 of its content (a rewrite that kept size and mtime).
    """
    try:
        lst = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(lst.st_mode) or FileIdentity.of(lst) != identity:
        return False
    if sha256 is None:
        return True
    h = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if FileIdentity.of(os.fstat(fh.fileno())) != identity:
            return False
        while chunk := fh.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest() == sha256


class FileLifecycle:
    """Applies ``on_done`` and quarantines bad inputs (thread-safe)."""

    def __init__(
        self,
        quarantine_dir: Path,
        quarantine_max_bytes: int,
        *,
        file_mode: int = 0o600,
        on_skip: Callable[[str], None] | None = None,
    ) -> None:
        self.quarantine_dir = quarantine_dir
        self.quarantine_max_bytes = quarantine_max_bytes
        self.file_mode = file_mode
        self.on_skip = on_skip
        self._lock = threading.Lock()
        self.deleted = 0
        self.moved = 0
        self.changed = 0  # on_done left a file that was not the scored version any more
        self.gone = 0  # on_done found nothing to do: the file was gone already
        self.quarantined = 0
        self.quarantine_bytes_written = 0
        self.failures = 0

    def finish(
        self,
        path: Path,
        on_done: OnDone,
        move_to: Path | None = None,
        *,
        identity: FileIdentity | None = None,
        sha256: str | None = None,
    ) -> Path | None:
        """Delete, move or keep one finished source file; returns its new path when moved.

        With ``identity`` (and ``sha256``) only the scored version is acted on; anything else
        at ``path`` is left and counted. A file that is gone already counts as done.
        """
        if on_done == "keep":
            return path
        try:
            if identity is not None and not self._is_scored(path, identity, sha256):
                return None
            if on_done == "delete":
                path.unlink(missing_ok=True)
                self.deleted += 1
                return None
            if move_to is None:
                raise LifecycleError(f"{path}: on_done 'move' without move_to")
            if not os.path.lexists(path):
                return None
            dest = move_file(path, move_to)
            self.moved += 1
            return dest
        except OSError as exc:
            self.failures += 1
            log.warning("%s: on_done %s failed: %s", log_name(path), on_done, log_name(exc))
            return None

    def _is_scored(self, path: Path, identity: FileIdentity, sha256: str | None) -> bool:
        same = still_scored(path, identity, sha256)
        if same is None:
            self.gone += 1
            self._skipped("gone")
            return False
        if not same:
            self.changed += 1
            self._skipped("changed")
            log.warning("%s: changed since it was scored; left for the next window",
                        log_name(path))
            return False
        return True

    def _skipped(self, reason: str) -> None:
        if self.on_skip is not None:
            self.on_skip(reason)

    def quarantine(
        self, source: str, name: str, path: Path | None, data: bytes | None = None
    ) -> Path | None:
        """Move a bad input (or write a frame's bytes) to ``quarantine/<source>/<name>``."""
        folder = self.quarantine_dir / source
        flat = name.replace(os.sep, "_")
        try:
            with self._lock:
                make_folder(folder, folder_mode(self.file_mode))
                if path is not None:
                    if not os.path.lexists(path):
                        return None
                    size = os.lstat(path).st_size
                    dest = move_file(path, folder, flat)
                    if not dest.is_symlink():  # a link's own mode means nothing on Linux
                        os.chmod(dest, self.file_mode)
                elif data is not None:
                    dest = unique_name(folder, flat)
                    atomic_write(dest, data, mode=self.file_mode)
                    size = len(data)
                    self.quarantine_bytes_written += size
                else:
                    return None
                self.quarantined += 1
                self._enforce_bound()
            log.warning("quarantined %s/%s -> %s (%d bytes)", source, log_name(name),
                        log_name(dest), size)
            return dest
        except OSError as exc:
            self.failures += 1
            log.warning("%s/%s: quarantine failed: %s", source, log_name(name), log_name(exc))
            return None

    def _enforce_bound(self) -> None:
        """Full policy: delete the oldest quarantined files above ``max_bytes``."""
        files: list[tuple[float, int, Path]] = []
        total = 0
        for p in self.quarantine_dir.rglob("*"):
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
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
            log.info("quarantine over %d bytes: removed %s", self.quarantine_max_bytes,
                     log_name(p))


def age_s(path: Path) -> float:
    """Seconds since ``path`` was last modified (``inf`` if it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")
