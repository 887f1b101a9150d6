"""A watched folder (watchdog) as a source of items.

A :class:`FolderSource` takes a file only once it is complete: on its inotify close-write
event or its rename within the folder; a file seen being written waits for its close-write;
with the polling observer, for files already present at start and for files renamed in from
another folder, once its size and mtime have been stable for ``stable_seconds``.
``.tmp`` / ``.part`` files and dot files are ignored. At most ``max_pending`` files are
tracked at once (metadata stays bounded under a backlog); beyond that they stay on disk and
a rescan of the folder picks them up once the backlog halves. A file is read only when the global
:class:`~cdml_edge.agent.windows.ByteBudget` admits its size; otherwise it stays on disk and
is retried, so intake pauses without losing anything.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.events import (
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from cdml_edge.agent.sources.base import (
    ErrorSink,
    FileTooLarge,
    ItemSink,
    SourceError,
    SourceStats,
)
from cdml_edge.agent.windows import ByteBudget
from cdml_edge.window.items import Item
from cdml_edge.window.payloads import item_id

log = logging.getLogger(__name__)

OLD_MTIME_S = 2.0
IGNORED_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", ".swp")

def is_candidate(name: str, patterns: Sequence[str]) -> bool:
    """Whether a file name is one the folder source takes."""
    if name.startswith(".") or name.lower().endswith(IGNORED_SUFFIXES):
        return False
    return any(fnmatch.fnmatch(name, p) for p in patterns) if patterns else True


@dataclass(frozen=True)
class FolderSpec:
    """What a folder source needs to know (mapped from the config)."""

    name: str
    path: Path
    modality: str
    patterns: tuple[str, ...] = ("*",)
    stable_seconds: float = 0.5
    polling: bool = False
    poll_interval: float = 1.0
    recursive: bool = False
    max_pending: int = 1024  # files tracked at once; more stay on disk and are rescanned
    max_file_bytes: int | None = None  # a window's max_bytes: a bigger file is never read


@dataclass
class _Pending:
    size: int
    mtime_ns: int
    since: float  # monotonic time the (size, mtime) pair was first seen
    closed: bool = False  # close-write or moved-in seen: complete now
    writing: bool = False  # inotify saw it written to: wait for its close-write
    seen: float = field(default_factory=time.time)  # wall time the agent first saw this version
    not_before: float = 0.0  # monotonic time before which it is not taken (a retry's backoff)


class _Handler(FileSystemEventHandler):
    def __init__(self, owner: FolderSource) -> None:
        self._owner = owner

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        if isinstance(event, FileMovedEvent):
            self._owner._forget(_as_str(event.src_path))
            self._owner._notice(_as_str(event.dest_path), closed=True)
        elif isinstance(event, FileClosedEvent):
            self._owner._notice(_as_str(event.src_path), closed=True)
        elif isinstance(event, FileModifiedEvent):  # written to: complete on its close-write
            self._owner._notice(_as_str(event.src_path), closed=False, writing=True)
        elif isinstance(event, FileCreatedEvent):
            # created, or renamed in from outside the folder (no close-write will follow):
            # complete once stable, unless a write marks it as being written
            self._owner._notice(_as_str(event.src_path), closed=False)
        elif isinstance(event, FileAttribEvent):  # e.g. utime: judged by stable size + mtime
            self._owner._notice(_as_str(event.src_path), closed=False)
        elif isinstance(event, FileDeletedEvent):
            self._owner._forget(_as_str(event.src_path))


def _as_str(p: str | bytes) -> str:
    return p.decode() if isinstance(p, bytes) else p


class FolderSource:
    """Watches one folder and feeds complete files to ``sink`` as :class:`Item`."""

    def __init__(
        self,
        spec: FolderSpec,
        budget: ByteBudget,
        sink: ItemSink,
        on_error: ErrorSink,
        scan_interval: float = 0.05,
    ) -> None:
        self.spec = spec
        self.stats = SourceStats()
        self._budget = budget
        self._sink = sink
        self._on_error = on_error
        self._scan_interval = scan_interval
        self._pending: dict[str, _Pending] = {}
        self._taken: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) in flight/kept
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._paused = False
        self._overflow = False  # notices were not recorded: rescan the folder when room
        self.rescans = 0
        self._observer: Any = None
        self._thread = threading.Thread(target=self._loop, name=f"src-{spec.name}", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.spec.path.mkdir(parents=True, exist_ok=True)
        if self.spec.polling:
            self._observer = PollingObserver(timeout=self.spec.poll_interval)
        else:
            self._observer = Observer()
        self._observer.schedule(
            _Handler(self), str(self.spec.path), recursive=self.spec.recursive
        )
        self._observer.start()
        self._initial_scan()  # after the watch is armed: nothing written meanwhile is missed
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and taking files (items already handed over are unaffected)."""
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2.0)
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def pause(self, paused: bool) -> None:
        """Stop (or resume) taking new files; used while draining on shutdown."""
        self._paused = paused

    def release(self, path: Path, keep: bool) -> None:
        """The item from ``path`` is finished; with ``keep`` it is not taken again unchanged."""
        if not keep:
            with self._cond:
                self._taken.pop(str(path), None)

    def retry(self, path: Path, delay: float) -> None:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed.

        Used when its whole window failed: the file is still on disk, but no new event will
        announce it, so it goes straight back into the pending set with a backoff.
        """
        key = str(path)
        try:
            st = os.stat(key)
        except OSError:
            self._forget(key)
            return
        with self._cond:
            self._taken.pop(key, None)
            self._pending[key] = _Pending(
                st.st_size, st.st_mtime_ns, time.monotonic(), closed=True,
                not_before=time.monotonic() + delay,
            )
            self._cond.notify_all()

    @property
    def pending_count(self) -> int:
        with self._cond:
            return len(self._pending)

    def max_file_bytes(self) -> int:
        """The largest file taken: what one window holds (``max_file_bytes``) and what the
        whole budget can be charged for it (its charge is a multiple of its size)."""
        b = self._budget
        fits = (b.max_bytes - b.item_extra.get(self.spec.modality, 0)) // b.data_factor
        cap = self.spec.max_file_bytes
        return max(0, fits if cap is None else min(fits, cap))

    # -- events ----------------------------------------------------------------------------
    def _notice(self, path: str, closed: bool, writing: bool = False) -> None:
        p = Path(path)
        if not is_candidate(p.name, self.spec.patterns):
            return
        if not self.spec.recursive and p.parent != self.spec.path:
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        with self._cond:
            if self._taken.get(path) == (st.st_size, st.st_mtime_ns):
                return
            # with inotify, a file seen being written is complete only on its close-write;
            # polling observers and the start-up scan rely on stable size + mtime instead
            writing = writing and not self.spec.polling and not closed
            cur = self._pending.get(path)
            if cur is None and len(self._pending) >= self.spec.max_pending:
                # full policy: the file stays on disk untracked; a rescan finds it later
                self._overflow = True
                return
            if cur is None or (cur.size, cur.mtime_ns) != (st.st_size, st.st_mtime_ns):
                was_writing = cur.writing if cur is not None else False
                self._pending[path] = _Pending(
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

    def _forget(self, path: str) -> None:
        with self._cond:
            self._pending.pop(path, None)
            self._taken.pop(path, None)

    def _rescan_if_room(self) -> None:
        with self._cond:
            due = self._overflow and len(self._pending) <= self.spec.max_pending // 2
            if due:
                self._overflow = False
        if due:
            self.rescans += 1
            self._initial_scan()

    def _initial_scan(self) -> None:
        walker = self.spec.path.rglob("*") if self.spec.recursive else self.spec.path.iterdir()
        old = time.time() - self.spec.stable_seconds
        for p in sorted(walker):
            if not p.is_file() or not is_candidate(p.name, self.spec.patterns):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            # a file untouched for stable_seconds is complete (crash recovery); newer ones wait
            self._notice(str(p), closed=st.st_mtime < old)

    # -- the scanner -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._rescan_if_room()
            ready = self._ready_paths()
            for path in ready:
                if self._stopped.is_set() or self._paused:
                    break
                if not self._take(path):
                    self.stats.paused += 1
                    break  # budget full: keep the rest on disk, retry next scan
            with self._cond:
                self._cond.wait(timeout=self._scan_interval)

    def _ready_paths(self) -> list[str]:
        if self._paused:
            return []
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
            if self.spec.polling or now - pend.since >= self.spec.stable_seconds:
                # re-stat: stable means the same size and mtime for stable_seconds
                try:
                    st = os.stat(path)
                except OSError:
                    self._forget(path)
                    continue
                with self._cond:
                    cur = self._pending.get(path)
                    if cur is None:
                        continue
                    if (st.st_size, st.st_mtime_ns) != (cur.size, cur.mtime_ns):
                        cur.size, cur.mtime_ns, cur.since = st.st_size, st.st_mtime_ns, now
                    elif now - cur.since >= self.spec.stable_seconds:
                        ready.append((cur.mtime_ns, path))
        ready.sort()
        return [p for _, p in ready]

    def _take(self, path: str) -> bool:
        """Read one complete file into an item; ``False`` when the budget is full."""
        with self._cond:
            pend = self._pending.get(path)
        if pend is None:
            return True
        name = os.path.relpath(path, self.spec.path)
        limit = self.max_file_bytes()
        if pend.size > limit:  # never read: the caller quarantines it (see ErrorSink)
            self._forget(path)
            self.stats.errors += 1
            self._on_error(self.spec.name, name, FileTooLarge(path, pend.size, limit), Path(path))
            return True
        charge = self._budget.cost(pend.size, self.spec.modality)
        if not self._budget.try_acquire(charge):
            return False
        try:
            data, st = _read_whole(Path(path), pend.size + 1)
        except SourceError as exc:
            self._budget.release(charge)
            self._forget(path)
            self.stats.errors += 1
            self._on_error(self.spec.name, name, exc, None)
            return True
        if len(data) > pend.size:  # grew since it was judged complete: still being written
            self._budget.release(charge)
            with self._cond:  # judged again once its size and mtime are stable
                self._pending[path] = _Pending(st.st_size, st.st_mtime_ns, time.monotonic())
            return True
        if len(data) != pend.size:  # shrank since it was judged complete
            self._budget.release(charge)
            charge = self._budget.cost(len(data), self.spec.modality)
            if not self._budget.try_acquire(charge):
                with self._cond:
                    self._pending[path] = _Pending(len(data), st.st_mtime_ns, time.monotonic())
                return False
        with self._cond:
            self._pending.pop(path, None)
            self._taken[path] = (len(data), st.st_mtime_ns)
        item = Item(
            source=self.spec.name,
            name=name,
            modality=self.spec.modality,
            ts=_arrival(st.st_mtime_ns / 1e9, pend.seen),
            data=data,
            item_id=item_id(self.spec.name, name, len(data), st.st_mtime_ns),
            path=Path(path),
            size=len(data),
            mtime_ns=st.st_mtime_ns,
            charge=charge,
        )
        self.stats.taken += 1
        self.stats.taken_bytes += len(data)
        self._sink(item)
        return True


def _arrival(mtime: float, seen: float) -> float:
    """When an item arrived: its mtime (the writer's close), or when the agent first saw it
    if that mtime is older than the sighting by more than OLD_MTIME_S (a file renamed in, or
    waiting at start). Result latency is measured from here."""
    return seen if seen - mtime > OLD_MTIME_S else mtime


def _read_whole(path: Path, at_most: int) -> tuple[bytes, os.stat_result]:
    """Read at most ``at_most`` bytes (the expected size + 1, so growth shows)."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(at_most)
    except FileNotFoundError as exc:
        raise SourceError(path, "vanished before it could be read") from exc
    except OSError as exc:
        raise SourceError(path, f"unreadable: {exc.strerror or exc}") from exc
    return data, st
