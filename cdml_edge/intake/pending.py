"""Which files of a watched folder are complete: the pending set of a folder source.

A file is complete on its close-write or its rename within the folder (``closed``); a file
seen being written (``writing``, inotify only) waits for its close-write; any other file
(polling, the start-up scan, a file renamed in from another folder) once the agent has seen
its identity (device, inode, size, mtime) unchanged for ``stable_seconds`` — a file found at
start is never judged by its mtime alone, it may still be written. With ``settle_seconds`` (opt-in,
for writers that close a file and open it again to append) a file complete by an event is
taken only once it has had no further write or close-write for that long and its identity is
unchanged when looked at again; a file judged by a stable identity then waits at least as
long. A settling file is a pending file: it counts against ``max_pending``. At most ``max_pending``
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

A file renamed is the same file. One read directly (not through a followed link) and still
in flight, or kept and renamed away (the last ``MAX_RENAMED`` remembered), is not taken again
when its identity shows up under another name — an event, a rescan, the start-up scan of a
re-armed watch: :meth:`PendingFiles.notice` returns the name it was taken under (the source
counts it) and later events on the new name are that take's. The pipeline still releases it
by the name it was taken under: several takes of one name (a writer that reuses its
temporary name) are released oldest first; a kept file is recorded under the name it has
now, a retried one is taken again there (``on_done`` finds it itself, see :mod:`~.finishing`).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from cdml_edge.fsio import log_name
from cdml_edge.intake.kept import KeptFiles
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

MAX_REFUSED = 4096
MAX_HELD = 16384
MAX_RENAMED = 1024  # kept files renamed away, remembered until they show up under a new name


@dataclass
class Pending:
    """A file noticed and not taken yet."""

    ident: FileIdentity
    since: float  # monotonic time this identity was first seen
    closed: bool = False  # close-write or moved-in seen: complete now
    writing: bool = False  # inotify saw it written to: wait for its close-write
    seen: float = field(default_factory=time.time)  # wall time the agent first saw this version
    not_before: float = 0.0  # monotonic time before which it is not taken (a retry's backoff)
    closed_at: float = 0.0  # monotonic time of its last close-write (what ``settle`` waits from)

    @property
    def size(self) -> int:
        """The file's size in bytes, as noticed."""
        return self.ident.size

    @property
    def mtime_ns(self) -> int:
        """The file's mtime in ns, as noticed."""
        return self.ident.mtime_ns


class _Take:
    """A file in flight: the name it was taken under, what was read, the name it has now."""

    __slots__ = ("direct", "ident", "now")

    def __init__(self, ident: FileIdentity, now: str, direct: bool) -> None:
        self.ident = ident
        self.now = now
        self.direct = direct  # read as itself, not through a followed link


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
        settle_seconds: float = 0.0,
    ) -> None:
        self.max_pending = max_pending
        self.stable_seconds = stable_seconds
        self.settle_seconds = settle_seconds
        self.polling = polling
        self._pending: dict[str, Pending] = {}
        self._taken: dict[str, FileIdentity] = {}  # in flight, by the name each has now
        self._takes: dict[str, list[_Take]] = {}  # in flight, by the name taken (oldest first)
        self._taken_as: dict[int, _Take] = {}  # in flight, read directly, by inode number
        self._kept_away: OrderedDict[FileIdentity, str] = OrderedDict()  # kept, renamed away
        self._held_as: dict[str, str] = {}  # held, renamed in flight: name taken -> name now
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
            return sum(map(len, self._takes.values()))

    @property
    def kept(self) -> int:
        """Files finished and left in place, remembered so they are not taken again."""
        return len(self._kept)

    @property
    def room(self) -> bool:
        """Whether one more file can be noticed now (fewer than ``max_pending`` waiting)."""
        with self._cond:
            return len(self._pending) < self.max_pending

    def flush_kept(self) -> None:
        """Write the kept-file changes held in memory, if any (see :meth:`KeptFiles.flush`)."""
        self._kept.flush()

    def close(self) -> None:
        """The source stopped: the kept-file record is written and closed."""
        self._kept.close()

    def prune_kept(self) -> int:
        """Forget the kept files that are gone or changed (after a full scan of the folder)."""
        return self._kept.prune()

    def get(self, path: str) -> Pending | None:
        """The pending file at ``path``, or ``None``."""
        with self._cond:
            return self._pending.get(path)

    def notice(
        self, path: str, st: os.stat_result, closed: bool, writing: bool, direct: bool = True
    ) -> str | None:
        """An event (or a scan) saw ``path`` with ``st``.

        ``closed`` if it is complete now, ``writing`` if it is being written to; ``direct``
        when ``st`` is the entry's own (not a followed link's target). Returns the name a
        file in flight or kept had before, when ``path`` is that file renamed; else ``None``.
        """
        ident = FileIdentity.of(st)
        if self._kept.get(path) == ident:
            return None
        with self._cond:
            if self._taken.get(path) == ident or self._held.get(path) == ident:
                return None
            if direct and (self._taken_as or self._kept_away):  # empty: nothing looked up
                was = self._renamed_locked(path, ident, st.st_ino)
                if was is not None:
                    return was or None
            # with inotify, a file seen being written is complete only on its close-write;
            # polling observers and the start-up scan rely on a stable identity instead
            writing = writing and not self.polling and not closed
            cur = self._pending.get(path)
            if cur is None and len(self._pending) >= self.max_pending:
                # full policy: the file stays on disk untracked; a rescan finds it later
                self._overflow = True
                return None
            now = time.monotonic()
            if cur is None or cur.ident != ident:
                was_writing = cur.writing if cur is not None else False
                self._pending[path] = Pending(
                    ident, now, closed, (writing or was_writing) and not closed, closed_at=now
                )
            elif closed:
                cur.closed, cur.writing, cur.closed_at = True, False, now
            elif writing:
                cur.writing = True
                cur.closed = cur.closed and not self.settle_seconds  # written again: settle
            if closed:
                self._cond.notify_all()
        return None

    def to_take(self, path: str) -> tuple[Pending | None, str | None]:
        """The pending file at ``path`` about to be taken, unless it is a file renamed.

        A rename whose event came (from another thread) before the first take was recorded
        is caught here: then ``(None, its name before)`` (``""``: in flight under this very
        name), and it is no longer pending. Else ``(the pending file or None, None)``.
        """
        with self._cond:
            pend = self._pending.get(path)
            if pend is None or not (self._taken_as or self._kept_away):
                return pend, None
            was = self._renamed_locked(path, pend.ident, pend.ident.ino)
            if was is None:
                return pend, None
            self._pending.pop(path, None)
            return None, was

    def _renamed_locked(self, path: str, ident: FileIdentity, ino: int) -> str | None:
        """The name ``path`` (``ident``) had when taken or kept, if it is such a file renamed.

        ``""`` when it is in flight under this very name; ``None`` when it is neither. A
        take in flight follows it (later events on ``path`` are that take's); a kept file
        is recorded under ``path`` (the record has its own lock, which is never held while
        waiting for this one).
        """
        take = self._taken_as.get(ino)  # an int: no identity hashed for every notice
        if take is not None and take.ident == ident:
            was = take.now
            self._taken[path] = ident  # later events on the new name are this take's
            if was == path:  # forgotten by name (a fault), still in flight
                return ""
            if self._taken.get(was) == ident:
                del self._taken[was]
            take.now = path
            self._pending.pop(path, None)  # what waited under that name was replaced
            return was
        kept_as = self._kept_away.pop(ident, None) if self._kept_away else None
        if kept_as is None:
            return None
        self._pending.pop(path, None)
        self._kept.put(path, ident)  # kept under the name it has now
        return kept_as

    def known_identity(self, path: str) -> FileIdentity | None:
        """The identity ``path`` had when last noticed or taken, or None if not tracked."""
        with self._cond:
            cur = self._pending.get(path)
            return cur.ident if cur is not None else self._taken.get(path)

    def forget(self, path: str) -> None:
        """``path`` is refused, failed or found gone: nothing of it is remembered."""
        with self._cond:
            self._pending.pop(path, None)
            while self._end_take_locked(path) is not None:
                pass
            self._taken.pop(path, None)
            self._held.pop(path, None)
            self._held_as.pop(path, None)
            self._refused.pop(path, None)
        self._kept.remove(path)

    def gone(self, path: str) -> None:
        """An event says ``path`` was deleted or renamed away.

        A file in flight stays in flight (the pipeline releases it by the name it was taken
        under) and a kept one is remembered by identity: either is known again if it shows
        up under another name.
        """
        kept = self._kept.get(path)
        with self._cond:
            self._pending.pop(path, None)
            self._held.pop(path, None)
            self._refused.pop(path, None)
            if kept is not None:
                self._kept_away.pop(kept, None)
                self._kept_away[kept] = path
                while len(self._kept_away) > MAX_RENAMED:
                    self._kept_away.popitem(last=False)
        if kept is not None:
            self._kept.remove(path)

    def _end_take_locked(self, name: str) -> _Take | None:
        """End the oldest take of ``name`` still in flight; it, or ``None`` if none."""
        takes = self._takes.get(name)
        if not takes:
            return None
        take = takes.pop(0)
        if not takes:
            del self._takes[name]
        if take.direct and self._taken_as.get(take.ident.ino) is take:
            del self._taken_as[take.ident.ino]
        ident = self._taken.get(take.now)
        if (ident is take.ident or (ident is not None and ident == take.ident)) and (
            not takes or not any(t.now == take.now and t.ident == ident for t in takes)
        ):
            del self._taken[take.now]
        return take

    def retry_at(self, path: str) -> str:
        """Where the file taken (or held) as ``path`` is now: what a retry of it takes."""
        with self._cond:
            takes = self._takes.get(path)
            if takes:
                return takes[0].now
            return self._held_as.get(path, path)

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

    def retry(self, path: str, delay: float) -> bool:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed.

        ``path`` is the name it was taken under: a file renamed since is taken again where
        it is now (:meth:`retry_at`). ``False`` when it is gone (then forgotten).
        """
        at = self.retry_at(path)
        try:
            st = os.stat(at)
        except OSError:
            st = None
        self._kept.remove(at)
        with self._cond:
            self._end_take_locked(path)
            self._held_as.pop(path, None)
            self._held.pop(at, None)
            if st is None:
                self._pending.pop(at, None)
                return False
            self._pending[at] = Pending(
                FileIdentity.of(st),
                time.monotonic(),
                closed=True,
                not_before=time.monotonic() + delay,
            )
            self._cond.notify_all()
        return True

    def requeue(self, path: str, ident: FileIdentity) -> None:
        """``path`` changed after it was judged complete: judge it again once stable."""
        with self._cond:
            self._pending[path] = Pending(ident, time.monotonic())

    def taken(self, path: str, ident: FileIdentity, direct: bool = True) -> None:
        """``path`` was read into an item: no longer pending, not taken again unchanged.

        ``direct``: read as itself, not through a followed link; then it is not taken again
        under another name either while it is in flight.
        """
        self._kept.remove(path)
        with self._cond:
            self._pending.pop(path, None)
            self._held.pop(path, None)
            self._held_as.pop(path, None)
            take = _Take(ident, path, direct)
            self._takes.setdefault(path, []).append(take)
            self._taken[path] = ident
            if direct:
                self._taken_as[ident.ino] = take

    def release(self, path: str, keep: bool = False) -> None:
        """``path`` was finished: deleted or moved, or with ``keep`` left in place.

        Once deleted or moved, a new file of that name is new; one left in place is
        remembered in the kept-file record so it is not taken again. ``path`` is the name it
        was taken under; of several takes of one name in flight (a writer reusing its
        temporary name) the oldest is released. A file renamed in flight is kept under the
        name it has now. One released without ``keep`` but still there under its new name
        was not finished (quarantined under its old name, say): a log line says so and it is
        left, taken again only by a rescan or a restart, as any file its ``on_done`` could
        not act on.
        """
        with self._cond:
            takes = self._takes.get(path)
            if not takes:
                return
            take = takes[0]
            if not keep and take.now == path:  # the common case: one lock, no stat
                self._end_take_locked(path)
                return
        renamed = take.now != path and _is_at(take.now, take.ident)
        if keep:  # recorded before it leaves the in-flight set: a notice in between never
            self._kept.put(take.now if renamed else path, take.ident)  # finds it in neither
        with self._cond:
            if self._takes.get(path, [None])[0] is take:
                self._end_take_locked(path)
        if renamed and not keep:
            log.warning(
                "%s was renamed to %s after it was taken and is still there: on_done did not "
                "act on it; left in place",
                log_name(path),
                log_name(take.now),
            )

    def hold(self, path: str) -> None:
        """``path`` was finished but waits for the ring: not taken again until a retry.

        Remembered in memory only, at most ``MAX_HELD`` (the oldest forgotten first: it is
        new to a later scan), so a restart takes every held file again.
        """
        with self._cond:
            take = self._end_take_locked(path)
            if take is None:
                return
            at = take.now  # renamed in flight: held where it is, retried as it was taken
            if at != path:
                self._held_as[path] = at
                while len(self._held_as) > MAX_HELD:
                    self._held_as.pop(next(iter(self._held_as)))
            self._held.pop(at, None)
            self._held[at] = take.ident
            while len(self._held) > MAX_HELD:
                self._held.pop(next(iter(self._held)))

    @property
    def _stable_s(self) -> float:
        """How long a file without a close-write must be seen unchanged (``settle`` too)."""
        return max(self.stable_seconds, self.settle_seconds)

    def _settled(self, pend: Pending, now: float) -> bool:
        """Whether a closed file had no close-write for ``settle_seconds`` (0: at once)."""
        return now - pend.closed_at >= self.settle_seconds

    def ask_rescan(self) -> None:
        """Notices were lost elsewhere (paths denied past a bound): rescan as when dropped."""
        with self._cond:
            self._overflow = True

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
                if pend.closed:
                    at = pend.closed_at + self.settle_seconds if self.settle_seconds else 0.0
                else:
                    at = pend.since + self._stable_s
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
                and (
                    self._settled(pend, now)
                    if pend.closed
                    else not pend.writing and now - pend.since >= self._stable_s
                )
            ]
        due.sort()
        settle = self.settle_seconds > 0
        for _, path, closed in due:
            if closed and not settle or self._stable_mtime(path, now) is not None:
                yield path

    def _stable_mtime(self, path: str, now: float) -> int | None:
        """The mtime of ``path`` if it has been stable long enough, else ``None``.

        Long enough: ``stable_seconds`` (or ``settle_seconds``, the longer), or for a closed
        file ``settle_seconds`` since its close-write; a closed file whose identity changed
        without an event (lost to an overflow) settles again from now.
        """
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
                cur.ident, cur.since, cur.closed_at = ident, now, now
                return None
            if cur.closed:
                return cur.mtime_ns if self._settled(cur, now) else None
            return cur.mtime_ns if now - cur.since >= self._stable_s else None


def _is_at(path: str, ident: FileIdentity) -> bool:
    """Whether the regular file ``path`` is ``ident`` (an ``lstat``: a link is not it)."""
    try:
        lst = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(lst.st_mode) and FileIdentity.of(lst) == ident
