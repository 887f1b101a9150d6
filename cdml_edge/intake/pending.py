"""Which files of a watched folder are complete: the pending set of a folder source.

A file is complete on its close-write or its rename within the folder (``closed``); a file
seen being written (``writing``, inotify only) waits for its close-write; any other file
(polling, the start-up scan, a file renamed in from another folder) once the agent has seen
its identity (device, inode, size, mtime) unchanged for ``stable_seconds`` — a file found at
start is never judged by its mtime alone, it may still be written. At most ``max_pending``
files are tracked: a file noticed beyond that stays on disk untracked and
:meth:`PendingFiles.rescan_due` asks for a rescan of the folder once the backlog halves.
Files taken are remembered by identity, so an unchanged one is not taken again: those in
flight always (they are bounded by the in-flight byte budget), those kept after their window
(``on_done: keep``) in the source's :class:`~.kept.KeptFiles` record, which forgets a file
only once it is gone or changed (it is bounded by what is in the folder, not by a count), so
no rescan, lost watch or restart scores a kept file twice; those held until the ring writes
again in memory, at most ``MAX_HELD`` (a restart takes them again). Entries refused (special
files, links, files that failed) are remembered by the identity of the entry, at most
``MAX_REFUSED``, so each is reported once (beyond the bound the oldest is forgotten and
may be reported again).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from cdml_edge.intake.kept import KeptFiles
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

MAX_REFUSED = 4096
MAX_HELD = 16384


@dataclass
class Pending:
    """A file noticed and not taken yet."""

    ident: FileIdentity
    since: float  # monotonic time this identity was first seen
    closed: bool = False  # close-write or moved-in seen: complete now
    writing: bool = False  # inotify saw it written to: wait for its close-write
    seen: float = field(default_factory=time.time)  # wall time the agent first saw this version
    not_before: float = 0.0  # monotonic time before which it is not taken (a retry's backoff)

    @property
    def size(self) -> int:
        """The file's size in bytes, as noticed."""
        return self.ident.size

    @property
    def mtime_ns(self) -> int:
        """The file's mtime in ns, as noticed."""
        return self.ident.mtime_ns


class PendingFiles:
    """The pending, taken and refused files of one folder source (thread-safe).

    The scanner thread sleeps in :meth:`wait` and is woken when a file becomes complete.
    """

    def __init__(
        self,
        max_pending: int,
        stable_seconds: float,
        polling: bool,
        kept: KeptFiles | None = None,
    ) -> None:
        self.max_pending = max_pending
        self.stable_seconds = stable_seconds
        self.polling = polling
        self._pending: dict[str, Pending] = {}
        self._taken: dict[str, FileIdentity] = {}  # in flight
        self._kept = kept if kept is not None else KeptFiles()  # finished, left in place
        self._held: dict[str, FileIdentity] = {}  # finished, waiting for the ring (memory)
        self._refused: dict[str, FileIdentity] = {}  # reported once, left alone
        self._cond = threading.Condition()
        self._overflow = False  # notices were not recorded: rescan the folder when room

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Files taken and not finished yet."""
        with self._cond:
            return len(self._taken)

    @property
    def kept(self) -> int:
        """Files finished and left in place, remembered so they are not taken again."""
        return len(self._kept)

    @property
    def room(self) -> bool:
        """Whether one more file can be noticed now (fewer than ``max_pending`` waiting)."""
        with self._cond:
            return len(self._pending) < self.max_pending

    def prune_kept(self) -> int:
        """Forget the kept files that are gone or changed (after a full scan of the folder)."""
        return self._kept.prune()

    def get(self, path: str) -> Pending | None:
        """The pending file at ``path``, or ``None``."""
        with self._cond:
            return self._pending.get(path)

    def notice(self, path: str, st: os.stat_result, closed: bool, writing: bool) -> None:
        """An event (or a scan) saw ``path`` with ``st``.

        ``closed`` if it is complete now, ``writing`` if it is being written to.
        """
        ident = FileIdentity.of(st)
        if self._kept.get(path) == ident:
            return
        with self._cond:
            if self._taken.get(path) == ident or self._held.get(path) == ident:
                return
            # with inotify, a file seen being written is complete only on its close-write;
            # polling observers and the start-up scan rely on a stable identity instead
            writing = writing and not self.polling and not closed
            cur = self._pending.get(path)
            if cur is None and len(self._pending) >= self.max_pending:
                # full policy: the file stays on disk untracked; a rescan finds it later
                self._overflow = True
                return
            if cur is None or cur.ident != ident:
                was_writing = cur.writing if cur is not None else False
                self._pending[path] = Pending(
                    ident, time.monotonic(), closed, (writing or was_writing) and not closed
                )
            elif closed:
                cur.closed = True
                cur.writing = False
            elif writing:
                cur.writing = True
            if closed:
                self._cond.notify_all()

    def known_identity(self, path: str) -> FileIdentity | None:
        """The identity ``path`` had when last noticed or taken, or None if not tracked."""
        with self._cond:
            cur = self._pending.get(path)
            return cur.ident if cur is not None else self._taken.get(path)

    def forget(self, path: str) -> None:
        """``path`` is gone (deleted, renamed away) or refused."""
        with self._cond:
            self._pending.pop(path, None)
            self._taken.pop(path, None)
            self._held.pop(path, None)
            self._refused.pop(path, None)
        self._kept.remove(path)

    def refuse(self, path: str, entry: FileIdentity) -> bool:
        """Leave ``path`` (its ``lstat`` identity ``entry``) alone until it changes.

        ``True`` the first time, when it is to be reported.
        """
        with self._cond:
            self._pending.pop(path, None)
            if self._refused.get(path) == entry:
                return False
            self._refused.pop(path, None)
            if len(self._refused) >= MAX_REFUSED:
                self._refused.pop(next(iter(self._refused)))
            self._refused[path] = entry
            return True

    def refused(self, path: str, entry: FileIdentity) -> bool:
        """Whether ``path`` with this ``lstat`` identity was refused already."""
        with self._cond:
            return self._refused.get(path) == entry

    def retry(self, path: str, st: os.stat_result, delay: float) -> None:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed."""
        self._kept.remove(path)
        with self._cond:
            self._taken.pop(path, None)
            self._held.pop(path, None)
            self._pending[path] = Pending(
                FileIdentity.of(st),
                time.monotonic(),
                closed=True,
                not_before=time.monotonic() + delay,
            )
            self._cond.notify_all()

    def requeue(self, path: str, ident: FileIdentity) -> None:
        """``path`` changed after it was judged complete: judge it again once stable."""
        with self._cond:
            self._pending[path] = Pending(ident, time.monotonic())

    def taken(self, path: str, ident: FileIdentity) -> None:
        """``path`` was read into an item: no longer pending, not taken again unchanged."""
        self._kept.remove(path)
        with self._cond:
            self._pending.pop(path, None)
            self._held.pop(path, None)
            self._taken[path] = ident

    def release(self, path: str, keep: bool = False) -> None:
        """``path`` was finished: deleted or moved, or with ``keep`` left in place.

        Once deleted or moved, a new file of that name is new; one left in place is
        remembered in the kept-file record so it is not taken again.
        """
        with self._cond:
            ident = self._taken.get(path)
        if keep and ident is not None:  # recorded before it leaves the in-flight set: a
            self._kept.put(path, ident)  # notice in between never finds it in neither
        with self._cond:
            self._taken.pop(path, None)

    def hold(self, path: str) -> None:
        """``path`` was finished but waits for the ring: not taken again until a retry.

        Remembered in memory only, at most ``MAX_HELD`` (the oldest forgotten first: it is
        new to a later scan), so a restart takes every held file again.
        """
        with self._cond:
            ident = self._taken.pop(path, None)
            if ident is None:
                return
            self._held.pop(path, None)
            self._held[path] = ident
            while len(self._held) > MAX_HELD:
                self._held.pop(next(iter(self._held)))

    def rescan_due(self) -> bool:
        """Whether notices were dropped and the backlog has halved since (asked once)."""
        with self._cond:
            due = self._overflow and len(self._pending) <= self.max_pending // 2
            if due:
                self._overflow = False
            return due

    def next_due(self) -> float | None:
        """Seconds until a pending file may be taken (0: now); ``None``: none waits on time.

        A file being written waits for its close-write (an event), not for time; a dropped
        notice (``overflow``) asks to be polled: 0.
        """
        now = time.monotonic()
        due: float | None = None
        with self._cond:
            if self._overflow:
                return 0.0
            for pend in self._pending.values():
                if pend.writing and pend.not_before <= now:
                    continue
                at = pend.not_before if pend.closed else pend.since + self.stable_seconds
                at = max(at, pend.not_before)
                if due is None or at < due:
                    due = at
        return None if due is None else max(0.0, due - now)

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout``; woken early when a file becomes complete or :meth:`wake`."""
        with self._cond:
            self._cond.wait(timeout=timeout)

    def wake(self) -> None:
        """Wake the thread in :meth:`wait`."""
        with self._cond:
            self._cond.notify_all()

    def ready(self) -> Iterator[str]:
        """The complete files, oldest mtime first, judged as the caller comes to them.

        A closed file is complete; one not closed is re-stat'ed when its turn comes (stable
        means the same identity for ``stable_seconds``), so a caller that stops early (its
        budget full) leaves the rest of a backlog unexamined until its next pass.
        """
        now = time.monotonic()
        with self._cond:
            due = [
                (pend.mtime_ns, path, pend.closed)
                for path, pend in self._pending.items()
                if pend.not_before <= now
                and (pend.closed or (not pend.writing and now - pend.since >= self.stable_seconds))
            ]
        due.sort()
        for _, path, closed in due:
            if closed or self._stable_mtime(path, now) is not None:
                yield path

    def _stable_mtime(self, path: str, now: float) -> int | None:
        """The mtime of ``path`` if it has been stable for ``stable_seconds``, else ``None``."""
        try:
            ident = FileIdentity.of(os.stat(path))
        except OSError:
            self.forget(path)
            return None
        with self._cond:
            cur = self._pending.get(path)
            if cur is None:
                return None
            if ident != cur.ident:
                cur.ident, cur.since = ident, now
                return None
            return cur.mtime_ns if now - cur.since >= self.stable_seconds else None
