"""What happens to a source file after its window: ``delete | move | keep``, or quarantine.

:meth:`FileLifecycle.finish` is called once the window is durable (``on_durable``), so a crash
before then leaves the file in place, and it acts only on the version that was scored
(:func:`still_scored`, checked again once the file is renamed aside): anything else at the
path is left for the next window and counted (``changed``). A file renamed within its folder
since it was read (a writer's temporary name renamed to its final one) is found by its
identity (:func:`renamed_within`) and finished under the name it has now, checked as above
(``renamed``). A followed link is finished as a
link (deleted or moved itself, never its target) while it is still the same link leading to
the same, unchanged target (:class:`~.regular.LinkedIdentity`). :meth:`FileLifecycle.quarantine`
moves a bad input to ``quarantine/<source>/``, a folder bounded by ``max_bytes`` (the oldest
deleted first). A quarantine that fails is a degraded state
(:class:`~cdml_edge.fsio.DiskFaults`): the file stays where it is, in a backlog of at most
``BACKLOG_MAX`` files tried again every ``retry_s``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import (
    PROBE_BYTES,
    TMP_PREFIX,
    DiskFaults,
    FaultHook,
    atomic_write,
    block_size,
    folder_mode,
    log_name,
    make_folder,
    on_disk,
    unique_name,
)
from cdml_edge.fsio.sparse import copy_keeping_holes
from cdml_edge.intake.regular import LinkedIdentity
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

OnDone = Literal["delete", "move", "keep"]
HASH_CHUNK = 1 << 20
_CLAIMS = itertools.count()
BACKLOG_MAX = 1024  # files whose quarantine failed, tried again; more are left unlisted
UNFIT_ERRORS = frozenset({"ModelSpecError"})
"""Error types of a well-formed input the model does not take (columns, shape): no bad file."""
LateHook = Callable[[str, str, Path], None]


class LifecycleError(CdmlError, OSError):
    """A source file that could not be deleted, moved or quarantined; names the file."""


def move_file(src: Path, folder: Path, name: str | None = None) -> Path:
    """Move ``src`` into ``folder`` (same file system: one rename) without overwriting.

    Across file systems: a copy (holes kept as holes, see
    :func:`~cdml_edge.fsio.sparse.copy_keeping_holes`; a link as the link itself), then the
    delete of ``src``; a copy cut short leaves no half file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    dest = unique_name(folder, name or src.name)
    try:
        os.replace(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # other file system: copy then delete
            raise
        try:
            if os.path.islink(src):
                os.symlink(os.readlink(src), dest)
            else:
                copy_keeping_holes(src, dest)
            os.unlink(src)
        except BaseException:  # a copy cut short (a full disk) leaves no half file
            if os.path.lexists(src):
                with contextlib.suppress(OSError):
                    os.unlink(dest)
            raise
    return dest


def still_scored(path: Path, identity: FileIdentity, sha256: str | None) -> bool | None:
    """Whether ``path`` is still the file that was scored; ``None`` when it is gone.

    Same identity (``lstat``: a link put in its place is not the file) and, when given, the
    same SHA-256 of its content (a rewrite that kept size and mtime). The content is read
    and hashed again unless the change time vouches for it: the identity was taken
    ``settled`` (:meth:`FileIdentity.read_at`) and ``st_ctime`` has not moved since.

    A followed link (a :class:`~.regular.LinkedIdentity`) must still be that link (``lstat``:
    a link, same inode, same ``readlink``) and its target the file read, checked as above.
    """
    try:
        lst = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not isinstance(identity, LinkedIdentity):
        if not stat.S_ISREG(lst.st_mode) or FileIdentity.of(lst) != identity:
            return False
        return _same_content(path, lst, identity, sha256)
    if not _is_link(path, lst, identity):
        return False
    try:
        st = os.stat(path)
        real = Path(os.path.realpath(path))
    except OSError:  # its target gone (or a loop): the link no longer leads to what was read
        return False
    target = identity.target
    if not stat.S_ISREG(st.st_mode) or FileIdentity.of(st) != target:
        return False
    return _same_content(real, st, target, sha256) is True  # the target gone: changed


def renamed_within(path: Path, identity: FileIdentity) -> Path | None:
    """The file ``identity`` under another name in the folder of ``path``, or ``None``.

    One pass over the folder, stat-ing only an entry with the same inode number: a regular
    file (``lstat``) of that identity. Dot names (the finishing's own aside names) and
    followed links (a :class:`~.regular.LinkedIdentity`) are never looked for.
    """
    if isinstance(identity, LinkedIdentity):
        return None
    try:
        with os.scandir(path.parent) as entries:
            for entry in entries:
                if entry.inode() != identity.ino or entry.name.startswith("."):
                    continue
                found = Path(entry.path)
                if found == path:
                    continue
                lst = os.lstat(found)
                if stat.S_ISREG(lst.st_mode) and FileIdentity.of(lst) == identity:
                    return found
    except OSError:  # the folder gone, or the entry gone meanwhile: not found
        return None
    return None


def _same_content(
    path: Path, st: os.stat_result, identity: FileIdentity, sha256: str | None
) -> bool | None:
    """Whether the regular file ``path`` (``st``, of ``identity``) still holds what was read."""
    if sha256 is None or (identity.settled and st.st_ctime_ns == identity.ctime_ns):
        return True
    return _content_matches(path, identity, sha256)


def _is_link(path: Path, lst: os.stat_result, identity: LinkedIdentity) -> bool:
    """Whether ``path`` (with ``lst``, its ``lstat``) is still the link that was followed."""
    if not stat.S_ISLNK(lst.st_mode):
        return False
    try:
        text = os.readlink(path)
    except OSError:  # replaced meanwhile
        return False
    return identity.is_link(lst, text)


def _is_scored_link(path: Path, identity: LinkedIdentity) -> bool:
    """Whether ``path`` is the link that was followed, still leading to the file read."""
    try:
        lst = os.lstat(path)
        st = os.stat(path)
    except OSError:
        return False
    return (
        _is_link(path, lst, identity)
        and stat.S_ISREG(st.st_mode)
        and FileIdentity.of(st) == identity.target
    )


def _content_matches(path: Path, identity: FileIdentity, sha256: str) -> bool | None:
    """Whether the file at ``path`` (still ``identity``) holds content of that SHA-256."""
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
        retry_s: float = 1.0,
        on_event: FaultHook | None = None,
        on_late: LateHook | None = None,
    ) -> None:
        self.quarantine_dir = quarantine_dir
        self.quarantine_max_bytes = quarantine_max_bytes
        self.block = block_size(quarantine_dir)  # the bound counts whole blocks (fsio.space)
        self.file_mode = file_mode
        self.on_skip = on_skip
        self.on_late = on_late
        self.faults = DiskFaults(
            "quarantine",
            quarantine_dir,
            retry_s=retry_s,
            on_event=on_event,
            probe=self._probe_disk,
            probe_ops=("quarantine",),
        )
        self._lock = threading.Lock()
        self._backlog: dict[Path, tuple[str, str]] = {}  # path -> (source, name), in order
        self.unlisted = 0  # failed beyond BACKLOG_MAX: left on disk, not tried again
        self._timer: threading.Timer | None = None
        self._closed = False
        self.deleted = 0
        self.moved = 0
        self.changed = 0  # on_done left a file that was not the scored version any more
        self.gone = 0  # on_done found nothing to do: the file was gone already
        self.renamed = 0  # on_done found the file renamed within its folder and acted there
        self.quarantined = 0
        self.left_in_place = 0  # too large to quarantine, or a keep folder's unfit file: left
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
        at ``path`` is left and counted. The scored version renamed within the folder of
        ``path`` is acted on where it is now (a move keeps its new name). A file that is gone
        already counts as done.
        """
        if on_done == "keep":
            return path
        if on_done == "move" and move_to is None:
            raise LifecycleError(f"{path}: on_done 'move' without move_to")
        try:
            src = name = path
            if identity is not None:
                at = self._scored_at(path, identity, sha256)
                if at is None:
                    return None
                claimed = self._claim(at, identity)
                if claimed is None:
                    return None
                src, name = claimed, at
                if at != path:
                    self.renamed += 1
                    log.info(
                        "%s: renamed to %s since it was read: on_done %s acts there",
                        log_name(path),
                        log_name(at.name),
                        on_done,
                    )
            if on_done == "delete":
                src.unlink(missing_ok=True)
                self.deleted += 1
                return None
            assert move_to is not None
            if not os.path.lexists(src):
                return None
            dest = move_file(src, move_to, name.name)
            self.moved += 1
            return dest
        except OSError as exc:
            self.failures += 1
            log.warning("%s: on_done %s failed: %s", log_name(path), on_done, log_name(exc))
            return None

    def _scored_at(self, path: Path, identity: FileIdentity, sha256: str | None) -> Path | None:
        """Where the scored version is: ``path``, or the name it was renamed to; else ``None``.

        Looked for under another name only when ``path`` is gone or holds another regular
        file (the writer's next one under a name it reuses): a file rewritten in place is
        changed, and one whose name now holds a link (to it, say) is left as it is.
        """
        same = still_scored(path, identity, sha256)
        at = path
        if not same:
            moved = None
            try:
                here: os.stat_result | None = os.lstat(path)
            except OSError:
                here = None
            if here is None or (stat.S_ISREG(here.st_mode) and FileIdentity.of(here) != identity):
                moved = renamed_within(path, identity)
            if moved is not None:
                at, same = moved, still_scored(moved, identity, sha256)
        if same is None:
            self.gone += 1
            self._skipped("gone")
            return None
        if not same:
            self.changed += 1
            self._skipped("changed")
            log.warning("%s: changed since it was scored; left for the next window", log_name(at))
            return None
        return at

    def _claim(self, path: Path, identity: FileIdentity) -> Path | None:
        """Rename the file at ``path`` aside and check that it is still the scored one.

        The aside name is a dot name the sources ignore. A version put there after the check
        is not deleted or moved but put back (under a unique name if yet another took the
        name), counted as changed. Returns the aside path of the scored file, or ``None``.
        """
        aside = path.with_name(f".cdml-done-{os.getpid()}-{next(_CLAIMS)}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            self.gone += 1
            self._skipped("gone")
            return None
        if isinstance(identity, LinkedIdentity):  # the link itself, still leading to the target
            if _is_scored_link(aside, identity):
                return aside
        else:
            lst = os.lstat(aside)
            if stat.S_ISREG(lst.st_mode) and FileIdentity.of(lst) == identity:
                return aside
        try:
            os.link(aside, path, follow_symlinks=False)  # back, unless a newer one is there
            os.unlink(aside)
        except FileExistsError:
            os.rename(aside, unique_name(path.parent, path.name))
        self.changed += 1
        self._skipped("changed")
        log.warning(
            "%s: replaced while it was being finished; left for the next window", log_name(path)
        )
        return None

    def _skipped(self, reason: str) -> None:
        if self.on_skip is not None:
            self.on_skip(reason)

    def quarantine(
        self, source: str, name: str, path: Path | None, data: bytes | None = None
    ) -> Path | None:
        """Move a bad input (or write a frame's bytes) to ``quarantine/<source>/<name>``.

        ``None`` when there was nothing to move, the file was left in place (see
        :meth:`quarantine_or_leave`) or the disk failed (then retried later).
        """
        return self.quarantine_or_leave(source, name, path, data)[0]

    def bad_input(
        self,
        source: str,
        name: str,
        path: Path | None,
        data: bytes | None,
        *,
        on_done: OnDone,
        error_type: str,
    ) -> tuple[Path | None, str | None]:
        """An input that failed to decode: quarantined (:meth:`quarantine_or_leave`) or left.

        A file of an ``on_done: keep`` folder that is well-formed but not what the model
        takes (``error_type`` in :data:`UNFIT_ERRORS`: its column count, its shape) is the
        user's, no bad input: never moved, counted in ``left_in_place``, and the reason is
        returned for its event (the caller keeps it, so it is not taken again unchanged).
        """
        if path is not None and on_done == "keep" and error_type in UNFIT_ERRORS:
            self.left_in_place += 1
            why = f"left in place (on_done: keep): {error_type} is the model's, not a bad file"
            log.warning("%s/%s: %s", source, log_name(name), why)
            return None, why
        return self.quarantine_or_leave(source, name, path, data)

    def quarantine_or_leave(
        self, source: str, name: str, path: Path | None, data: bytes | None = None
    ) -> tuple[Path | None, str | None]:
        """:meth:`quarantine`, and why the input was left where it is (``None`` if it was not).

        A file larger than ``max_bytes`` is never moved: it is left in place (on ``keep``
        and every other ``on_done``), nothing is evicted for it, and the reason says so.
        The path returned is where the file is once the bound was applied.
        """
        try:
            dest, size, why = self._quarantine(source, name, path, data)
        except OSError as exc:
            self.failures += 1
            log.warning("%s/%s: quarantine failed: %s", source, log_name(name), log_name(exc))
            self.faults.failed("quarantine", exc)
            if path is not None:
                self._list(path, source, name)
            return None, None
        if why is not None:
            self.left_in_place += 1
            log.warning("%s/%s: %s", source, log_name(name), why)
            return None, why
        if dest is None:
            return None, None
        self.faults.ok("quarantine")
        log.warning(
            "quarantined %s/%s -> %s (%d bytes)", source, log_name(name), log_name(dest), size
        )
        return dest, None

    def _quarantine(
        self, source: str, name: str, path: Path | None, data: bytes | None
    ) -> tuple[Path | None, int, str | None]:
        folder = self.quarantine_dir / source
        flat = name.replace(os.sep, "_")
        with self._lock:
            if path is not None:
                if not os.path.lexists(path):
                    return None, 0, None
                size = os.lstat(path).st_size
                if self._on_disk(size) > self.quarantine_max_bytes:
                    return None, size, self._too_large(size, "left in place")
                _real_folder(folder, folder_mode(self.file_mode))
                dest = move_file(path, folder, flat)
                if not dest.is_symlink():  # a link's own mode means nothing on Linux
                    os.chmod(dest, self.file_mode)
            elif data is not None:
                if self._on_disk(len(data)) > self.quarantine_max_bytes:
                    return None, len(data), self._too_large(len(data), "not written")
                _real_folder(folder, folder_mode(self.file_mode))
                dest = unique_name(folder, flat)
                atomic_write(dest, data, mode=self.file_mode)
                size = len(data)
                self.quarantine_bytes_written += size
            else:
                return None, 0, None
            self.quarantined += 1
            self._enforce_bound(dest)
        return (dest if os.path.lexists(dest) else None), size, None

    def _on_disk(self, size: int) -> int:
        """What a file of ``size`` bytes takes in the quarantine: whole blocks, as it counts."""
        return on_disk(size, self.block)

    def _too_large(self, size: int, what: str) -> str:
        return (
            f"{what}: {size} bytes ({self._on_disk(size)} on the disk in whole blocks), larger "
            f"than quarantine.max_bytes ({self.quarantine_max_bytes})"
        )

    # -- the backlog of files whose quarantine failed ---------------------------------------
    @property
    def backlog(self) -> int:
        """Files whose quarantine failed and that are tried again."""
        with self._lock:
            return len(self._backlog)

    def _list(self, path: Path, source: str, name: str) -> None:
        with self._lock:
            if path not in self._backlog and len(self._backlog) >= BACKLOG_MAX:
                self.unlisted += 1
                return
            self._backlog[path] = (source, name)
            self._arm_locked()

    def _arm_locked(self) -> None:
        if self._timer is None and self._backlog and not self._closed:
            self._timer = threading.Timer(self.faults.retry_s, self.retry_backlog)
            self._timer.daemon = True
            self._timer.start()

    def retry_backlog(self) -> int:
        """Try the backlog again, oldest first, until one fails; the number moved.

        Each file moved is reported through ``on_late``; a file gone meanwhile is dropped.
        """
        with self._lock:
            self._timer = None
            todo = list(self._backlog.items())
        moved = 0
        for path, (source, name) in todo:
            try:
                dest, _, _ = self._quarantine(source, name, path, None)
            except OSError as exc:
                self.faults.failed("quarantine", exc)
                break
            with self._lock:
                self._backlog.pop(path, None)
            if dest is not None:
                moved += 1
                self.faults.ok("quarantine")
                log.warning("quarantined %s/%s late -> %s", source, log_name(name), log_name(dest))
                self._report_late(source, name, dest)
        with self._lock:
            self._arm_locked()
        return moved

    def _report_late(self, source: str, name: str, dest: Path) -> None:
        if self.on_late is None:
            return
        try:
            self.on_late(source, name, dest)
        except Exception:  # a broken hook must not stop the retries
            log.exception("quarantine: report of %s failed", log_name(dest))

    def _probe_disk(self) -> None:
        """A small write in the quarantine (a frame that failed leaves no backlog to retry)."""
        make_folder(self.quarantine_dir, folder_mode(self.file_mode))
        probe = self.quarantine_dir / f"{TMP_PREFIX}probe"
        atomic_write(probe, PROBE_BYTES, mode=self.file_mode, fsync=False)
        probe.unlink()

    def close(self) -> None:
        """Stop retrying (the files of the backlog stay where they are)."""
        self.faults.close()
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _enforce_bound(self, newest: Path) -> None:
        """Full policy: delete the earliest quarantined files above ``max_bytes``.

        Each file counts its disk space in whole blocks (a 100-byte file takes 4 KiB).

        Earliest by quarantine time (the inode's change time: a moved file keeps its old
        mtime), never ``newest``, the file just quarantined (it fits the bound on its own).
        """
        files: list[tuple[float, int, Path]] = []
        total = 0
        for p in self.quarantine_dir.rglob("*"):
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                size = self._on_disk(st.st_size)
                total += size
                if p != newest:
                    files.append((st.st_ctime, size, p))
        if total <= self.quarantine_max_bytes:
            return
        files.sort()
        for _, size, p in files:
            if total <= self.quarantine_max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size
            log.info("quarantine over %d bytes: removed %s", self.quarantine_max_bytes, log_name(p))


def _real_folder(folder: Path, mode: int) -> None:
    """Make ``folder`` if missing; :class:`LifecycleError` when it is a link or not a folder.

    A source's quarantine folder that is a link (to a folder elsewhere) is never moved into:
    the file stays where it is (a failed quarantine, tried again) and nothing lands outside.
    """
    make_folder(folder, mode)
    if folder.is_symlink() or not folder.is_dir():
        raise LifecycleError(
            errno.ENOTDIR, f"{log_name(folder)}: a link or not a folder, never used for quarantine"
        )


def age_s(path: Path) -> float:
    """Seconds since ``path`` was last modified (``inf`` if it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")
