"""Durable file writes: the one copy of write-temporary, fsync, rename, fsync-the-folder.

:func:`atomic_write` replaces ``path`` with ``data`` so that a reader (or a crash at any
moment) sees either the old file or the whole new one, never half of it. :func:`unique_name`
finds a free name in a folder without overwriting, shortening names that the file system
would refuse as too long. :func:`display_name` and :func:`log_name` show a file name that
may hold bytes that are not UTF-8 (or control characters) in payloads and log lines.
:class:`DiskFaults` keeps the state of a store whose writes fail (a full disk, an I/O
error): which operations fail, when to try again, one event per episode.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
NAME_MAX = 255  # bytes of one path component on Linux file systems


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """fsync a folder, so that a rename or a new file in it survives a power cut."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str],
    *,
    mode: int = 0o644,
    fsync: bool = True,
    tmp_suffix: str = ".part",
) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` atomically once the ``with`` block succeeds.

    The data go to a temporary file in the same folder (``.tmp-*``), which is flushed,
    fsynced (unless ``fsync=False``), given ``mode`` and renamed over ``path``; then the
    folder is fsynced. On any error the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    folder = target.parent
    fd, tmp = _mkstemp(folder, tmp_suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(folder)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    mode: int = 0o644,
    fsync: bool = True,
) -> int:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_writer`); the byte count."""
    with atomic_writer(path, mode=mode, fsync=fsync) as fh:
        fh.write(data)
    return len(data)


def _mkstemp(folder: Path, suffix: str) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=folder)


def _nbytes(text: str) -> int:
    """Bytes of ``text`` on disk (a name from ``os.fsdecode`` may hold escaped raw bytes)."""
    return len(text.encode("utf-8", "surrogateescape"))


def _cut(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` bytes, never half a character."""
    out, used = [], 0
    for ch in text:
        n = _nbytes(ch)
        if used + n > limit:
            break
        out.append(ch)
        used += n
    return "".join(out)


def fit_name(name: str, limit: int = NAME_MAX) -> str:
    """``name`` shortened (keeping its extension) to at most ``limit`` bytes on disk.

    Raw bytes that are not UTF-8 (``os.fsdecode``'s escapes) are kept, counted one byte each.
    """
    if _nbytes(name) <= limit:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or _nbytes(ext) > 16:
        stem, ext = name, ""
    keep = limit - (_nbytes(ext) + 1 if ext else 0)
    short = _cut(stem, keep)
    return f"{short}.{ext}" if ext else short


def display_name(name: str) -> str:
    """``name`` as valid UTF-8 text: each raw byte that is not UTF-8 (kept by ``os.fsdecode``
    as a lone surrogate) shown as ``%XX``, everything else unchanged (a literal ``%`` too).

    ``%`` and not ``\\xNN``: a backslash would read as a path separator in archive member
    names.
    """
    if not any("\ud800" <= c <= "\udfff" for c in name):
        return name
    return "".join(_shown(c) for c in name)


def _shown(c: str) -> str:
    if "\udc80" <= c <= "\udcff":
        return f"%{ord(c) - 0xDC00:02X}"
    return "\ufffd" if "\ud800" <= c <= "\udfff" else c


_LOG_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def log_name(name: object) -> str:
    """``name`` (a path or a name) safe for one log line: as :func:`display_name`, with
    control characters, line separators and bidirectional overrides escaped."""
    text = display_name(str(name))
    return "".join(_LOG_ESCAPES.get(ord(c)) or (_escape(c) if _unsafe(c) else c) for c in text)


def _unsafe(c: str) -> bool:
    o = ord(c)
    return o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029) or 0x202A <= o <= 0x202E or (
        0x2066 <= o <= 0x2069
    )


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def folder_mode(file_mode: int) -> int:
    """The mode of a folder holding files of ``file_mode``: ``x`` wherever ``r`` is set."""
    return file_mode | ((file_mode & 0o444) >> 2)


def make_folder(folder: Path, mode: int) -> None:
    """Make ``folder`` (and missing parents) with ``mode`` (not narrowed by the umask); an
    existing one is left as it is."""
    if folder.is_dir():
        return
    make_folder(folder.parent, mode)
    try:
        folder.mkdir(mode=mode)
    except FileExistsError:
        return
    os.chmod(folder, mode)


def unique_name(
    folder: str | os.PathLike[str],
    name: str,
    *,
    exists: Callable[[Path], bool] | None = None,
    attempts: int = 100_000,
) -> Path:
    """A path in ``folder`` for ``name`` that does not exist yet: ``name``, then
    ``stem.1.ext``, ``stem.2.ext``, ...; names too long for the file system are shortened.

    Raises ``FileExistsError`` when no free name is found within ``attempts``.
    """
    base = Path(folder)
    taken = exists or (lambda p: os.path.lexists(p))
    first = fit_name(name)
    if not taken(base / first):
        return base / first
    stem, dot, ext = first.rpartition(".")
    if not dot or not stem:
        stem, ext = first, ""
    for n in range(1, attempts):
        tail = f".{n}.{ext}" if ext else f".{n}"
        cand = _cut(stem, NAME_MAX - _nbytes(tail)) + tail
        if not taken(base / cand):
            return base / cand
    raise FileExistsError(f"{base / name}: no free name for it")


FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
"""The errors of a full disk (or quota); any other ``OSError`` is an I/O error."""

FaultHook = Callable[[str, dict[str, str]], None]
PROBE_MIN_S = 1.0  # a disk probe runs at most this often
PROBE_BYTES = b"\0" * 65536  # what a probe writes: room for more than a few bytes


class DiskFaults:
    """The write health of one store (``name``: spool, retention, quarantine) in ``where``.

    The store reports each operation that failed (:meth:`failed`) or succeeded (:meth:`ok`).
    While any operation fails the store is *degraded* (:attr:`degraded` says why); the first
    failure of an episode calls ``on_event("{name}_disk_full" | "{name}_io_error", info)``
    and the success that ends it ``on_event("{name}_disk_ok", info)``, each with one log
    line. :meth:`may_try` paces retries: after a failure an operation is tried again only
    every ``retry_s`` seconds, so a full disk costs no busy loop. Thread-safe.

    An operation the store may not try again by itself (an append while the broker is back,
    a ring write on an idle line) would keep the store degraded for good: for the ops in
    ``probe_ops`` a timer calls ``probe()`` (a small write through the store's own write
    path) every ``retry_s`` (``PROBE_MIN_S`` at least) while they fail, and ends their
    failure when it succeeds. A probe that fails is quiet (no count, no event).
    :meth:`close` stops it.
    """

    def __init__(
        self,
        name: str,
        where: str | os.PathLike[str],
        *,
        retry_s: float = 1.0,
        on_event: FaultHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[], None] | None = None,
        probe_ops: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.where = str(where)
        self.retry_s = retry_s
        self.on_event = on_event
        self.clock = clock
        self.probe = probe
        self.probe_ops = probe_ops
        self.probes = 0  # probes run (each a small write)
        self._timer: threading.Timer | None = None
        self._closed = False
        self.errors = 0  # failed operations, all episodes together
        self.episodes = 0
        self._failing: dict[str, str] = {}  # operation -> what went wrong
        self._next_try: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def degraded(self) -> str | None:
        """Why the store is degraded now (``None`` when every operation works)."""
        with self._lock:
            if not self._failing:
                return None
            return "; ".join(f"{op}: {why}" for op, why in sorted(self._failing.items()))

    def may_try(self, op: str) -> bool:
        """Whether ``op`` may touch the disk now (always, unless it failed < retry_s ago)."""
        with self._lock:
            return self.clock() >= self._next_try.get(op, 0.0)

    def retry_now(self) -> None:
        """Let every operation touch the disk at once (a last attempt at close)."""
        with self._lock:
            self._next_try.clear()

    def failed(self, op: str, exc: OSError) -> str | None:
        """``op`` failed with ``exc``: degraded until it succeeds again. Returns the event
        kind when this failure began an episode."""
        why = f"{exc.strerror or exc} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]"
        with self._lock:
            self.errors += 1
            self._next_try[op] = self.clock() + self.retry_s
            first = not self._failing
            self._failing[op] = why
            if first:
                self.episodes += 1
            if op in self.probe_ops:
                self._arm_locked()
        if not first:
            return None
        kind = f"{self.name}_{'disk_full' if exc.errno in FULL_ERRNOS else 'io_error'}"
        log.error("%s %s: %s failed: %s; degraded, retrying every %.1fs",
                  self.name, self.where, op, why, self.retry_s)
        self._emit(kind, {"dir": self.where, "op": op, "error": why})
        return kind

    def ok(self, op: str) -> str | None:
        """``op`` succeeded; the episode ends once no operation fails. Returns the event
        kind when this success ended an episode."""
        with self._lock:
            self._next_try.pop(op, None)
            if op not in self._failing:
                return None
            del self._failing[op]
            recovered = not self._failing
        if not recovered:
            return None
        kind = f"{self.name}_disk_ok"
        log.warning("%s %s: writes work again (%s)", self.name, self.where, op)
        self._emit(kind, {"dir": self.where, "op": op})
        return kind

    def _arm_locked(self) -> None:
        if self.probe is None or self._timer is not None or self._closed:
            return
        self._timer = threading.Timer(max(self.retry_s, PROBE_MIN_S), self._probe)
        self._timer.daemon = True
        self._timer.start()

    def _probe(self) -> None:
        """Probe the disk for the failing ops in ``probe_ops``; heal them when it works."""
        with self._lock:
            self._timer = None
            ops = [op for op in self.probe_ops if op in self._failing]
            if not ops or self._closed or self.probe is None:
                return
            probe = self.probe
            self.probes += 1
        try:
            probe()
        except Exception:  # still failing (or the probe is broken): quietly again later
            with self._lock:
                self._arm_locked()
            return
        for op in ops:
            self.ok(op)

    def close(self) -> None:
        """Stop probing (the store is closed)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _emit(self, kind: str, info: dict[str, str]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, info)
        except Exception:  # a broken hook must not break the store
            log.exception("%s: event hook failed for %s", self.name, kind)


__all__ = [
    "FULL_ERRNOS",
    "PROBE_BYTES",
    "PROBE_MIN_S",
    "DiskFaults",
    "FaultHook",
    "atomic_write",
    "atomic_writer",
    "display_name",
    "fit_name",
    "folder_mode",
    "fsync_dir",
    "log_name",
    "make_folder",
    "unique_name",
]
