"""A watched folder (watchdog) as a source of items.

A :class:`FolderSource` turns file events into notices for its
:class:`~cdml_edge.agent.sources.pending.PendingFiles`, which judges when a file is complete
(close-write, rename, or stable size and mtime) and keeps the tracked metadata bounded
(``max_pending``; a backlog beyond it stays on disk and is found by a rescan).
``.tmp`` / ``.part`` files and dot files are ignored. A file is read only when the global
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
from dataclasses import dataclass
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
from cdml_edge.agent.sources.pending import PendingFiles
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
        self.files = PendingFiles(spec.max_pending, spec.stable_seconds, spec.polling)
        self._stopped = threading.Event()
        self._paused = False
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
        self.files.wake()
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
            self.files.release(str(path))

    def retry(self, path: Path, delay: float) -> None:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed.

        Used when its whole window failed: the file is still on disk, but no new event will
        announce it, so it goes straight back into the pending set with a backoff.
        """
        key = str(path)
        try:
            st = os.stat(key)
        except OSError:
            self.files.forget(key)
            return
        self.files.retry(key, st, delay)

    @property
    def pending_count(self) -> int:
        return len(self.files)

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
        self.files.notice(path, st, closed, writing)

    def _forget(self, path: str) -> None:
        self.files.forget(path)

    def _rescan_if_room(self) -> None:
        if self.files.rescan_due():
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
            ready = [] if self._paused else self.files.ready()
            for path in ready:
                if self._stopped.is_set() or self._paused:
                    break
                if not self._take(path):
                    self.stats.paused += 1
                    break  # budget full: keep the rest on disk, retry next scan
            self.files.wait(self._scan_interval)

    def _take(self, path: str) -> bool:
        """Read one complete file into an item; ``False`` when the budget is full."""
        pend = self.files.get(path)
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
            self.files.requeue(path, st.st_size, st.st_mtime_ns)  # judged again once stable
            return True
        if len(data) != pend.size:  # shrank since it was judged complete
            self._budget.release(charge)
            charge = self._budget.cost(len(data), self.spec.modality)
            if not self._budget.try_acquire(charge):
                self.files.requeue(path, len(data), st.st_mtime_ns)
                return False
        self.files.taken(path, len(data), st.st_mtime_ns)
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
