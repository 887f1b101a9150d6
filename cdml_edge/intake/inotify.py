"""A direct inotify reader for one local folder, read in the folder source's own thread.

watchdog relays each inotify event through three threads and a Python object per event;
measured at 100 files/s that was 1.5 ms of CPU per file, more than decoding and scoring
it. :class:`InotifyWatch` reads the kernel's events itself (``inotify_init1`` and
``inotify_add_watch`` through ctypes) when the source thread asks, and :func:`coalesce` folds
one read's events into one notice per file, so a file written and closed costs one ``lstat``.

The events mean what watchdog's did to the folder source: a close-write, or a rename within
the folder, makes a file complete; a write marks it as being written (complete on its
close-write); a create, a rename in from elsewhere or a touch is judged by a stable
identity; a delete or rename away forgets it. A queue overflow asks for a rescan; the
folder deleted, moved or unmounted ends the watch (:attr:`InotifyWatch.alive`).

Only for a non-recursive, non-polling folder on Linux (:func:`available`); other platforms,
network mounts (``polling``) and ``recursive`` keep watchdog.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import select
import struct
import sys
from collections import OrderedDict
from dataclasses import dataclass

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)

WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
_HEADER = struct.Struct("iIII")
READ_BYTES = 64 * 1024  # one read: at least 64 KiB / (16 + name) events
RECENT_MOVES = 256  # rename cookies remembered to pair a move within the folder

# what a file's events in one read come to
CLOSED = "closed"  # complete now (close-write, or renamed within the folder)
WRITING = "writing"  # written to, not closed yet
SEEN = "seen"  # created, renamed in, touched: complete once stable


@dataclass
class Notice:
    """One file's events of one read: forget it first (``forget``), then notice it (``state``)."""

    path: str
    forget: bool = False
    state: str | None = None


def available() -> bool:
    """Whether this platform has inotify (Linux with a C library that exports it)."""
    return sys.platform.startswith("linux") and _libc() is not None


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "inotify_init1") else None


class InotifyWatch:
    """The inotify watch of one folder; :meth:`read` returns what happened in it."""

    def __init__(self, folder: str) -> None:
        libc = _libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        self.folder = folder
        self.alive = True
        self.overflows = 0
        self._recent: OrderedDict[int, str] = OrderedDict()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            self._close_pipe()
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd
        wd = libc.inotify_add_watch(fd, os.fsencode(folder), WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            self.close()
            raise OSError(err, f"cannot watch {folder}: {os.strerror(err)}", folder)

    def wake(self) -> None:
        """Make a :meth:`wait` in progress return now (stop, or a retry to take)."""
        # a full pipe is awake already; a closed one is stopping
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; ``True`` when events are there to :meth:`read`."""
        try:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], max(0.0, timeout))
        except (OSError, ValueError):  # closed meanwhile
            return False
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 4096):
                    pass
        return self._fd in ready

    def read(self) -> tuple[list[Notice], bool]:
        """The events queued now, folded per file, and whether the queue overflowed."""
        try:
            buf = os.read(self._fd, READ_BYTES)
        except BlockingIOError:
            return [], False
        except OSError:
            self.alive = False
            return [], False
        events = []
        overflow = False
        off = 0
        while off + _HEADER.size <= len(buf):
            _wd, mask, cookie, size = _HEADER.unpack_from(buf, off)
            name = buf[off + _HEADER.size : off + _HEADER.size + size].rstrip(b"\0")
            off += _HEADER.size + size
            if mask & IN_Q_OVERFLOW:
                overflow = True
                self.overflows += 1
            if mask & LOST:
                self.alive = False
            if name and not mask & IN_ISDIR:
                events.append((os.path.join(self.folder, os.fsdecode(name)), mask, cookie))
        return coalesce(events, self._recent), overflow

    def close(self) -> None:
        """Stop watching; the descriptors are closed."""
        self.alive = False
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def coalesce(
    events: list[tuple[str, int, int]], recent: OrderedDict[int, str] | None = None
) -> list[Notice]:
    """Fold ``(path, mask, cookie)`` events, in order, into one :class:`Notice` per path.

    A delete or rename away forgets what was known of the path (and what came before it in
    this read); a close-write or a rename from within the folder (its cookie in ``recent``,
    which remembers renames away across reads) makes it complete; a later write makes it
    being written again.
    """
    recent = OrderedDict() if recent is None else recent
    out: dict[str, Notice] = {}
    for path, mask, cookie in events:
        note = out.get(path)
        if note is None:
            note = out[path] = Notice(path)
        if mask & (IN_DELETE | IN_MOVED_FROM):
            note.forget, note.state = True, None
            if mask & IN_MOVED_FROM:
                recent[cookie] = path
                while len(recent) > RECENT_MOVES:
                    recent.popitem(last=False)
        elif mask & IN_MOVED_TO:
            moved_within = recent.pop(cookie, None) is not None
            note.state = CLOSED if moved_within else SEEN
        elif mask & IN_CLOSE_WRITE:
            note.state = CLOSED
        elif mask & IN_MODIFY:
            note.state = WRITING
        elif mask & (IN_CREATE | IN_ATTRIB) and note.state is None:
            note.state = SEEN
    return list(out.values())
