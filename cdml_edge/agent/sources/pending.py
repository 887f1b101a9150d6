"""Which files of a watched folder are complete: the pending set of a folder source.

A file is complete on its close-write or its rename within the folder (``closed``); a file
seen being written (``writing``, inotify only) waits for its close-write; any other file
(polling, the start-up scan, a file renamed in from another folder) once its size and mtime
have been stable for ``stable_seconds``. At most ``max_pending`` files are tracked: a file
noticed beyond that stays on disk untracked and :meth:`PendingFiles.rescan_due` asks for a
rescan of the folder once the backlog halves. Files taken (in flight, or kept after their
window) are remembered by size and mtime, so an unchanged one is not taken again.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Pending:
    """A file noticed and not taken yet."""

    size: int
    mtime_ns: int
    since: float  # monotonic time the (size, mtime) pair was first seen
    closed: bool = False  # close-write or moved-in seen: complete now
    writing: bool = False  # inotify saw it written to: wait for its close-write
    seen: float = field(default_factory=time.time)  # wall time the agent first saw this version
    not_before: float = 0.0  # monotonic time before which it is not taken (a retry's backoff)


class PendingFiles:
    """The pending and taken files of one folder source (thread-safe).

    The scanner thread sleeps in :meth:`wait` and is woken when a file becomes complete.
    """

    def __init__(self, max_pending: int, stable_seconds: float, polling: bool) -> None:
        self.max_pending = max_pending
        self.stable_seconds = stable_seconds
        self.polling = polling
        self._pending: dict[str, Pending] = {}
        self._taken: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) in flight/kept
        self._cond = threading.Condition()
        self._overflow = False  # notices were not recorded: rescan the folder when room

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    def get(self, path: str) -> Pending | None:
        with self._cond:
            return self._pending.get(path)

    def notice(self, path: str, st: os.stat_result, closed: bool, writing: bool) -> None:
        """An event (or a scan) saw ``path`` with ``st``; ``closed`` if it is complete now,
        ``writing`` if it is being written to."""
        with self._cond:
            if self._taken.get(path) == (st.st_size, st.st_mtime_ns):
                return
            # with inotify, a file seen being written is complete only on its close-write;
            # polling observers and the start-up scan rely on stable size + mtime instead
            writing = writing and not self.polling and not closed
            cur = self._pending.get(path)
            if cur is None and len(self._pending) >= self.max_pending:
                # full policy: the file stays on disk untracked; a rescan finds it later
                self._overflow = True
                return
            if cur is None or (cur.size, cur.mtime_ns) != (st.st_size, st.st_mtime_ns):
                was_writing = cur.writing if cur is not None else False
                self._pending[path] = Pending(
                    st.st_size, st.st_mtime_ns, time.monotonic(), closed,
                    (writing or was_writing) and not closed,
                )
            elif closed:
                cur.closed = True
                cur.writing = False
            elif writing:
                cur.writing = True
            if closed:
                self._cond.notify_all()

    def forget(self, path: str) -> None:
        """``path`` is gone (deleted, renamed away) or refused."""
        with self._cond:
            self._pending.pop(path, None)
            self._taken.pop(path, None)

    def retry(self, path: str, st: os.stat_result, delay: float) -> None:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed."""
        with self._cond:
            self._taken.pop(path, None)
            self._pending[path] = Pending(
                st.st_size, st.st_mtime_ns, time.monotonic(), closed=True,
                not_before=time.monotonic() + delay,
            )
            self._cond.notify_all()

    def requeue(self, path: str, size: int, mtime_ns: int) -> None:
        """``path`` changed after it was judged complete: judge it again once stable."""
        with self._cond:
            self._pending[path] = Pending(size, mtime_ns, time.monotonic())

    def taken(self, path: str, size: int, mtime_ns: int) -> None:
        """``path`` was read into an item: no longer pending, not taken again unchanged."""
        with self._cond:
            self._pending.pop(path, None)
            self._taken[path] = (size, mtime_ns)

    def release(self, path: str) -> None:
        """``path`` was finished (deleted or moved): a new file of that name is new."""
        with self._cond:
            self._taken.pop(path, None)

    def rescan_due(self) -> bool:
        """Whether notices were dropped and the backlog has halved since (asked once)."""
        with self._cond:
            due = self._overflow and len(self._pending) <= self.max_pending // 2
            if due:
                self._overflow = False
            return due

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout``; woken early when a file becomes complete or :meth:`wake`."""
        with self._cond:
            self._cond.wait(timeout=timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def ready(self) -> list[str]:
        """The complete files, oldest mtime first (files not closed are re-stat'ed: stable
        means the same size and mtime for ``stable_seconds``)."""
        now = time.monotonic()
        ready: list[tuple[int, str]] = []
        with self._cond:
            items = list(self._pending.items())
        for path, pend in items:
            if pend.not_before > now:
                continue
            if pend.closed:
                ready.append((pend.mtime_ns, path))
                continue
            if pend.writing:
                continue
            if self.polling or now - pend.since >= self.stable_seconds:
                mtime_ns = self._stable_mtime(path, now)
                if mtime_ns is not None:
                    ready.append((mtime_ns, path))
        ready.sort()
        return [p for _, p in ready]

    def _stable_mtime(self, path: str, now: float) -> int | None:
        """The mtime of ``path`` if it has been stable for ``stable_seconds``, else ``None``."""
        try:
            st = os.stat(path)
        except OSError:
            self.forget(path)
            return None
        with self._cond:
            cur = self._pending.get(path)
            if cur is None:
                return None
            if (st.st_size, st.st_mtime_ns) != (cur.size, cur.mtime_ns):
                cur.size, cur.mtime_ns, cur.since = st.st_size, st.st_mtime_ns, now
                return None
            return cur.mtime_ns if now - cur.since >= self.stable_seconds else None
