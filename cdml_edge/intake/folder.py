"""A watched folder as a source of items.

A local folder on Linux is watched by a direct inotify reader, read in the source's own
thread (:mod:`~.inotify`); ``polling`` (network mounts), ``recursive`` and other platforms
use watchdog's observers. A :class:`FolderSource` turns file events into notices for its
:class:`~cdml_edge.intake.pending.PendingFiles` (which judges when a file is complete) and
reads a complete file once the :class:`~cdml_edge.intake.budget.ByteBudget` admits its size;
otherwise it stays on disk and is retried. ``.tmp`` / ``.part`` files and dot files are
ignored; a file renamed after it was taken (a writer's temporary name the patterns
match) is not taken again under its new name (counted in ``stats.renamed``, see
:mod:`~.pending`); what :mod:`~.regular` refuses (not a regular file, a link not followed)
is reported once through the error sink and left where it is, and any other exception
while taking one file becomes an :class:`~.base.IntakeFault` (the caller quarantines it).

A folder the agent may not read is a state of the source (an event when it begins and one
when it ends, :attr:`FolderSource.degraded` meanwhile); so is each subfolder of a
``recursive`` source (:mod:`~.subfolders`). With ``settle`` a file complete by an event waits
until it has had no write or close-write for that long (writers that reopen to append).

The scanner runs as one supervised part (``src-<name>``) that also watches the watch: when
the folder is deleted, moved or unmounted it dies with :class:`~.base.WatchLost`, and its
restart arms a new watch (making the folder again) and rescans.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import logging
import os
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog import events as _events
from watchdog.events import (
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

from cdml_edge.fsio import display_name, log_name
from cdml_edge.intake import inotify
from cdml_edge.intake.base import (
    ErrorSink,
    FileTooLarge,
    FileUnreadable,
    FolderReadable,
    FolderUnreadable,
    IntakeFault,
    ItemSink,
    LinkRefused,
    NotRegularFile,
    SourceError,
    SourceStats,
    SubfolderUnreadable,
    WatchLost,
)
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.kept import KeptFiles
from cdml_edge.intake.pending import Pending, PendingFiles
from cdml_edge.intake.regular import (
    LinkedIdentity,
    LinkPolicy,
    admit,
    identity_read,
    link_at,
    read_regular,
    target_of,
)
from cdml_edge.intake.subfolders import UnreadableSubfolders, unreadable_why
from cdml_edge.supervisor import Spawn, Worker, plain_thread
from cdml_edge.window.items import FileIdentity, Item
from cdml_edge.window.payloads import item_id

# watchdog 7 reports a touch (inotify IN_ATTRIB) as its own event; watchdog 6 (the last release
# for Python 3.10) reports it as a modification: there a change of mtime alone is a touch.
_ATTRIB_EVENT: type[FileSystemEvent] | None = getattr(_events, "FileAttribEvent", None)
_TOUCH_EVENTS: tuple[type[FileSystemEvent], ...] = (
    (FileCreatedEvent,) if _ATTRIB_EVENT is None else (FileCreatedEvent, _ATTRIB_EVENT)
)

log = logging.getLogger(__name__)

OLD_MTIME_S = 2.0
FUTURE_MTIME_S = 2.0
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
    max_pending: int = 1024  # files tracked at once; more wait on disk for the scan to reach them
    kept_record: Path | None = None  # the kept-file record's file (None: in memory)
    max_file_bytes: int | None = None  # a window's max_bytes: a bigger file is never read
    follow_symlinks: bool = False  # follow links, only to files inside path or link_roots
    link_roots: tuple[Path, ...] = ()
    keep: bool = False  # on_done: keep: the files are the user's, a fault never moves one
    settle: float = 0.0  # s without a write or close-write after a close-write (0: taken on it)


class _Handler(FileSystemEventHandler):
    """Turns watchdog events into notices; never raises into the observer's thread."""

    def __init__(self, owner: FolderSource) -> None:
        self._owner = owner

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            if not isinstance(event, _events.DirDeletedEvent):  # made, moved in, its mode
                where = event.dest_path if isinstance(event, _events.DirMovedEvent) else None
                self._owner._folder_event(_as_str(where or event.src_path))
            return
        path = _as_str(event.dest_path if isinstance(event, FileMovedEvent) else event.src_path)
        try:
            self._dispatch(event)
        except Exception as exc:  # a fault on one file must not stop the watch
            self._owner._fault(path, exc)

    def _dispatch(self, event: FileSystemEvent) -> None:
        owner = self._owner
        if isinstance(event, FileMovedEvent):
            owner._gone(_as_str(event.src_path))
            owner._notice(_as_str(event.dest_path), closed=True)
        elif isinstance(event, FileClosedEvent):
            owner._notice(_as_str(event.src_path), closed=True)
        elif isinstance(event, FileModifiedEvent):  # written to: complete on its close-write
            path = _as_str(event.src_path)
            writing = _ATTRIB_EVENT is not None or not owner._touched(path)
            owner._notice(path, closed=False, writing=writing)
        elif isinstance(event, _TOUCH_EVENTS):
            # created, renamed in from outside the folder (no close-write will follow) or
            # touched: complete once stable, unless a write marks it as being written
            owner._notice(_as_str(event.src_path), closed=False)
        elif isinstance(event, FileDeletedEvent):
            owner._gone(_as_str(event.src_path))


def _as_str(p: str | bytes) -> str:
    return os.fsdecode(p)


INOTIFY_LIMITS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM})
"""What ``inotify_init1`` / ``inotify_add_watch`` say when the kernel's limits are reached
(instances per user, watches per user, open files): the folder is polled instead."""

IDLE_SCAN = 1.0  # s: the longest an inotify-watched source sleeps (the watch's health)
MIN_SCAN = 0.005  # s: the shortest, so a file due now never spins the thread
READABLE_CHECK_S = 1.0  # s: how often a readable folder is checked (at once on a refusal)
MAX_UNREADABLE = 4096  # unreadable files remembered (reported once until they change)


def _at_least(due: float | None, floor: float) -> float:
    return IDLE_SCAN if due is None else max(floor, due)


class FolderSource:
    """Watches one folder and feeds complete files to ``sink`` as :class:`Item`."""

    def __init__(
        self,
        spec: FolderSpec,
        budget: ByteBudget,
        sink: ItemSink,
        on_error: ErrorSink,
        scan_interval: float = 0.05,
        spawn: Spawn = plain_thread,
    ) -> None:
        self.spec = spec
        self.stats = SourceStats()
        self._budget = budget
        self._sink = sink
        self._on_error = on_error
        self._scan_interval = scan_interval
        self._links = LinkPolicy.of(spec.follow_symlinks, spec.path, spec.link_roots)
        self.files = PendingFiles(
            spec.max_pending,
            spec.stable_seconds,
            spec.polling,
            _kept_record(spec),
            settle_seconds=spec.settle,
        )
        self._scan: Iterator[str] | None = None  # the full pass over the folder in progress
        self._stopped = threading.Event()
        self._paused = False
        self._armed = False
        self.rescans = 0
        self.inotify_fallbacks = 0  # arms that fell back to polling (inotify's limits)
        self._polled_because: str | None = None
        self.deep_fallbacks = 0  # arms whose watch hit the recursion limit: the tree is rescanned
        self._rescanned_because: str | None = None  # set once, for the source's life
        self._deep_rescan_at = 0.0  # monotonic time of the next rescan of a tree too deep
        self._unreadable: str | None = None  # why the folder cannot be read now
        self._check_at = 0.0  # monotonic time the folder's readability is checked next
        self.unreadable_episodes = 0
        self._unreadable_files: dict[str, tuple[FileIdentity, int]] = {}  # path -> (id, mode)
        self.subfolders = UnreadableSubfolders(spec.path)  # recursive: those it cannot read
        self._subfolders_check_at = 0.0  # monotonic time they are checked again
        self.unreadable_subfolder_episodes = 0
        self._observer: Any = None
        self._inotify: inotify.InotifyWatch | None = None
        self._thread: Worker = spawn(f"src-{spec.name}", self._run)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Arm the watch and start the scanner.

        A watch that cannot be armed now is armed again by the supervised scanner (which
        counts it dead meanwhile).
        """
        try:
            self._arm()
        except Exception as exc:
            log.error("%s: cannot watch %s yet: %s", self.spec.name, log_name(self.spec.path), exc)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and taking files (items already handed over are unaffected).

        The kept-file record is written (what it held in memory) and closed: a window
        finished later opens it again for its change.
        """
        self._stopped.set()
        self._wake()
        self._thread.join(timeout=2.0)
        self._disarm()
        self.files.close()

    def pause(self, paused: bool) -> None:
        """Stop (or resume) taking new files; used while draining on shutdown."""
        self._paused = paused

    def release(self, path: Path, keep: bool) -> None:
        """The item from ``path`` is finished.

        With ``keep`` it is not taken again unchanged (see :mod:`~.kept`).
        """
        self.files.release(str(path), keep)

    def hold(self, path: Path) -> None:
        """The item from ``path`` is finished but its file waits for the ring.

        Not taken again unchanged until :meth:`retry` (remembered in memory only: a held
        file is taken again after a restart).
        """
        self.files.hold(str(path))

    def retry(self, path: Path, delay: float) -> None:
        """Take ``path`` again, complete as it is, once ``delay`` seconds have passed.

        Used when its whole window failed: the file is still on disk, but no new event will
        announce it, so it goes straight back into the pending set with a backoff. A file
        renamed since it was taken is taken again under the name it has now.
        """
        if self.files.retry(str(path), delay):
            self._wake()

    @property
    def pending_count(self) -> int:
        """Files noticed and not taken yet."""
        return len(self.files)

    def max_file_bytes(self) -> int:
        """The largest file taken.

        What one window holds (``max_file_bytes``) and what the whole budget can be charged
        for it (its charge is a multiple of its size).
        """
        return self._budget.largest_file(self.spec.modality, self.spec.max_file_bytes)

    # -- the watch -------------------------------------------------------------------------
    @property
    def direct(self) -> bool:
        """Whether the folder is watched by the direct inotify reader (else by watchdog)."""
        spec = self.spec
        return not spec.polling and not spec.recursive and inotify.available()

    @property
    def degraded(self) -> str | None:
        """Why the folder is watched less well than configured now, or ``None``."""
        subs = self.subfolders.describe() if self.spec.recursive else None
        why = [
            w for w in (self._unreadable, subs, self._polled_because, self._rescanned_because) if w
        ]
        return "; ".join(why) or None

    def _arm(self) -> None:
        """(Re)start the watch on the folder (made if missing), then scan what is there.

        Out of inotify instances or watches (the kernel's per-user limits), the folder is
        polled instead, :attr:`degraded` says so, and every re-arm tries inotify again. A
        folder the agent may not read is not watched yet: that state (see
        :meth:`_folder_readable`) arms the watch once it can be read.
        """
        self._disarm()
        if not self.spec.path.is_dir():
            self.spec.path.mkdir(parents=True, exist_ok=True)
            log.warning(
                "source %s: made the folder %s (it was missing)",
                self.spec.name,
                log_name(self.spec.path),
            )
        why = unreadable_why(self.spec.path)
        if why is not None:
            if self._unreadable is None:
                self._became_unreadable(why)
            self._armed = True  # by the state's end, in the scanner
            return
        try:
            self._watch_or_rescan(polling=self.spec.polling)
            self._polled_because = None
        except OSError as exc:
            if self.spec.polling or exc.errno not in INOTIFY_LIMITS:
                raise
            self._disarm()
            self._watch_or_rescan(polling=True)
            self._poll_instead(exc)
        self.files.polling = (
            self.spec.polling or self._polled_because is not None or self._rescanned
        )
        self._armed = True
        self._initial_scan()  # after the watch is armed: nothing written meanwhile is missed

    def _watch(self, polling: bool) -> None:
        if not polling and self.direct:
            self._inotify = inotify.InotifyWatch(str(self.spec.path))
            return
        if polling:
            observer: Any = PollingObserver(timeout=self.spec.poll_interval)
        else:
            observer = Observer()
        self._observer = observer  # before it starts: a failed start is stopped by _disarm
        observer.schedule(_Handler(self), str(self.spec.path), recursive=self.spec.recursive)
        observer.start()

    @property
    def _rescanned(self) -> bool:
        """Whether the tree is rescanned by the source instead of watched (too deep)."""
        return self._rescanned_because is not None

    def _watch_or_rescan(self, polling: bool) -> None:
        """Start the watch; a tree too deep for watchdog's recursive walk is rescanned instead.

        Watchdog's observers walk the tree recursively when they start (``os.walk`` for the
        inotify watches, ``DirectorySnapshot`` for polling), and again in their own thread
        (a folder moved in, each poll): past the recursion limit (about 1,000 levels) that
        raises ``RecursionError``. Then the source's own iterative walk rescans the tree every
        ``poll_interval`` for the rest of its life: a watch tried again could leave the
        partial watches of another failed walk behind.
        """
        if self._rescanned:
            return
        try:
            self._watch(polling=polling)
        except RecursionError:
            self._disarm()
            self._rescan_instead()

    def _rescan_instead(self) -> None:
        """Say (once) that the tree is too deep to watch and is rescanned instead."""
        self.deep_fallbacks += 1
        self._rescanned_because = (
            f"tree too deep to watch (the watch's walk passed the recursion limit, "
            f"{sys.getrecursionlimit()}): rescanned every {self.spec.poll_interval:g} s"
        )
        self._deep_rescan_at = time.monotonic() + self.spec.poll_interval  # _arm scans now
        log.warning("%s: %s: %s", self.spec.name, log_name(self.spec.path), self._rescanned_because)

    def _poll_instead(self, exc: OSError) -> None:
        """Say (once per stretch) that the folder is polled because inotify is exhausted."""
        self.inotify_fallbacks += 1
        first = self._polled_because is None
        self._polled_because = (
            f"polled every {self.spec.poll_interval:g} s: inotify refused a watch "
            f"({os.strerror(exc.errno or 0)}; raise fs.inotify.max_user_instances / "
            "max_user_watches)"
        )
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "%s: %s: %s",
            self.spec.name,
            log_name(self.spec.path),
            self._polled_because,
        )

    def _disarm(self) -> None:
        watch, self._inotify = self._inotify, None
        if watch is not None:
            watch.close()
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            if observer.ident is not None:  # a start that failed left no thread to join
                observer.join(timeout=2.0)

    def _watch_alive(self) -> bool:
        if self._rescanned:  # no watch: the folder's being there is its health
            return self.spec.path.is_dir()
        if self._inotify is not None:
            return self._inotify.alive
        obs = self._observer
        return obs is not None and obs.is_alive() and all(e.is_alive() for e in obs.emitters)

    def _wake(self) -> None:
        """Wake the scanner (stop, a retry): from its wait on the watch or on the files."""
        watch = self._inotify
        if watch is not None:
            watch.wake()
        self.files.wake()

    def _wait(self, poll: bool = False) -> None:
        """Sleep until the next scan; with inotify, read and apply the events that came.

        With watchdog, or ``poll`` (intake paused or the budget full), the next scan is a
        scan interval away. With inotify it is when a pending file may become stable (or its
        retry is due), at most :data:`IDLE_SCAN` seconds: events wake it earlier.
        """
        watch = self._inotify
        if watch is None:
            self.files.wait(self._scan_interval)
            return
        due = None if poll else self.files.next_due()
        timeout = self._scan_interval if poll else min(IDLE_SCAN, _at_least(due, MIN_SCAN))
        if not watch.wait(timeout):
            return
        notices, overflow = watch.read()
        for note in notices:
            try:
                self._apply(note)
            except Exception as exc:  # a fault on one file must not stop the watch
                self._fault(note.path, exc)
        if overflow:  # the kernel dropped events: what is in the folder now is the truth
            self.rescans += 1
            self._initial_scan()

    def _apply(self, note: inotify.Notice) -> None:
        if note.forget:
            self._gone(note.path)
        if note.state is not None:
            closed = note.state == inotify.CLOSED
            self._notice(note.path, closed=closed, writing=note.state == inotify.WRITING)

    # -- an unreadable folder --------------------------------------------------------------
    def _folder_readable(self) -> bool:
        """Whether the folder can be listed and its entries looked up (checked once a second).

        It cannot (its mode changed, ``chmod 000``; another owner) is a state of the source:
        a log line and a :class:`~.base.FolderUnreadable` event when it begins,
        :attr:`degraded` meanwhile, and a rescan when it ends: the files announced meanwhile
        could not be looked at, and no event announces them again.
        """
        now = time.monotonic()
        if self._unreadable is None and now < self._check_at:
            return True
        self._check_at = now + READABLE_CHECK_S
        why = unreadable_why(self.spec.path)
        if why is None:
            if self._unreadable is not None:
                self._readable_again()
            return True
        if self._unreadable is None:
            self._became_unreadable(why)
        return False

    def _became_unreadable(self, why: str) -> None:
        self._unreadable = f"folder unreadable ({why}): no file taken until it can be read"
        self.unreadable_episodes += 1
        self._scan = None  # a pass cannot go on; the rescan at the end starts another
        self.stats.errors += 1
        exc = FolderUnreadable(self.spec.path, why)
        log.warning("%s: %s", self.spec.name, log_name(exc))
        self._on_error(self.spec.name, None, exc, None)

    def _readable_again(self) -> None:
        """The folder can be read again: rescan it (re-armed if its watch stopped meanwhile)."""
        self._unreadable = None
        self.rescans += 1
        log.warning(
            "%s: %s can be read again: rescanning it", self.spec.name, log_name(self.spec.path)
        )
        self._on_error(self.spec.name, None, FolderReadable(self.spec.path), None)
        if self._watch_alive():
            self._initial_scan()
        else:  # watchdog's polling observer stops on a folder it cannot list
            self._arm()

    def _denied(self, path: str | None = None) -> None:
        """An entry could not be looked up for a lack of permission: check the folder now.

        With ``path``, it is kept with its folder (:meth:`_check_suspects`): in a
        ``recursive`` source the subfolders above it are checked too, and once the folder is
        readable (at once, when its mode changed only for a moment) ``path`` is looked up
        again: no event announces that file again.
        """
        self._check_at = 0.0
        if path is not None:  # looked up again once its folder is found readable
            self.subfolders.suspect(os.path.dirname(path), path)

    # -- unreadable subfolders (recursive) ------------------------------------------------
    def _folder_event(self, folder: str) -> None:
        """Watchdog saw a folder made, moved in or changed: look at it (a recursive source)."""
        if self.spec.recursive and folder != str(self.spec.path):
            self.subfolders.suspect(folder)

    def _check_suspects(self) -> None:
        """Look at the folders suspected; look up again the paths denied in a readable one.

        In a ``recursive`` source a folder (or one above it) that cannot be read is a state
        (its end rescans the tree, denied paths included). Past :data:`~.subfolders.MAX_DENIED`
        paths kept, the tree is rescanned.
        """
        suspects, past = self.subfolders.suspects()
        for folder, denied in suspects:
            found = self.subfolders.first_unreadable(folder) if self.spec.recursive else None
            if found is not None:
                self._subfolder_unreadable(*found)
                continue
            for path in denied:
                try:
                    self._notice(path, closed=False)
                except Exception as exc:
                    self._fault(path, exc)
        if past:  # once no pass is in progress and the pending set has room
            self.files.ask_rescan()

    def _check_subfolders(self) -> None:
        """Once a second, look at the subfolders unreadable.

        One readable again (or gone) ends its state (an event each); then the tree is
        watched again (watchdog adds the watches it could not) and rescanned.
        """
        if self.subfolders.overflow_rescan_due():  # past the bound: found by rescans alone
            self.rescans += 1
            self._arm()
        now = time.monotonic()
        if not len(self.subfolders) or now < self._subfolders_check_at:
            return
        self._subfolders_check_at = now + READABLE_CHECK_S
        ended = self.subfolders.ended()
        for folder, gone in ended:
            log.warning(
                "%s: %s %s: rescanning the tree",
                self.spec.name,
                log_name(folder),
                "is gone" if gone else "can be read again",
            )
            event = FolderReadable(folder, gone=gone)
            self._on_error(self.spec.name, self._name(folder), event, None)
        if ended:
            self.rescans += 1
            self._arm()

    def _subfolder_unreadable(self, folder: str, why: str) -> None:
        """``folder`` cannot be read: reported once, until it can (:meth:`_check_subfolders`)."""
        if not self.subfolders.add(folder, why):
            return
        self.unreadable_subfolder_episodes += 1
        self.stats.errors += 1
        exc = SubfolderUnreadable(folder, why)
        log.warning("%s: %s", self.spec.name, log_name(exc))
        self._on_error(self.spec.name, self._name(folder), exc, None)

    def _unreadable_file(self, path: str, exc: FileUnreadable) -> None:
        """A file the agent may not open: reported once until its content or mode changes.

        Not remembered as pending: an event (its ``chmod``, a write) or a rescan notices it
        again, and it is taken once it can be read.
        """
        self._forget(path)
        if unreadable_why(self.spec.path) is not None:  # its folder's fault: that state says so
            self._denied()
            return
        try:
            lst = os.lstat(path)
        except OSError:
            return
        seen = (FileIdentity.of(lst), lst.st_mode)
        if self._unreadable_files.get(path) == seen:
            return
        self._unreadable_files.pop(path, None)
        if len(self._unreadable_files) >= MAX_UNREADABLE:
            self._unreadable_files.pop(next(iter(self._unreadable_files)))
        self._unreadable_files[path] = seen
        self.stats.errors += 1
        log.warning("%s: %s", self.spec.name, log_name(exc))
        self._on_error(self.spec.name, self._name(path), exc, None)

    # -- events ----------------------------------------------------------------------------
    def _name(self, path: str) -> str:
        """The item name of ``path``: relative to the folder, valid UTF-8."""
        return display_name(os.path.relpath(path, self.spec.path))

    def _notice(self, path: str, closed: bool, writing: bool = False) -> None:
        p = Path(path)
        if not is_candidate(p.name, self.spec.patterns):
            return
        if not self.spec.recursive and p.parent != self.spec.path:
            return
        try:
            lst = os.lstat(path)
        except PermissionError:  # the folder may not be searched: the readability check says
            self._denied(path)
            return
        except OSError:
            return
        if stat.S_ISDIR(lst.st_mode) or self.files.refused(path, _entry(lst)):
            return
        try:
            _, st = admit(path, lst, self._links)
        except SourceError as exc:  # a FIFO, socket, device or link: never opened
            self._refuse(path, lst, exc)
            return
        except OSError:  # a followed link whose target is gone
            return
        was = self.files.notice(path, st, closed, writing, direct=st is lst)
        if was is not None:  # a file taken (or kept) renamed: the same bytes, not taken again
            self._count_renamed(path, was)

    def _count_renamed(self, path: str, was: str) -> None:
        """Count (and log at debug) a file taken or kept as ``was`` seen again as ``path``."""
        if not was:  # in flight under this very name: nothing renamed
            return
        self.stats.renamed += 1
        log.debug(
            "%s: %s is %s renamed: the same file, not taken again",
            self.spec.name,
            log_name(path),
            log_name(os.path.basename(was)),
        )

    def _touched(self, path: str) -> bool:
        """Whether ``path`` changed only its mtime since last noticed or taken (a touch)."""
        known = self.files.known_identity(path)
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (
            known is not None
            and (st.st_size, st.st_ino) == (known.size, known.ino)
            and (st.st_mtime_ns != known.mtime_ns)
        )

    def _refuse(self, path: str, lst: os.stat_result | None, exc: SourceError) -> None:
        """Leave ``path`` alone; reported once (until it changes)."""
        self.files.forget(path)
        if lst is not None and not self.files.refuse(path, _entry(lst)):
            return
        self.stats.refused += 1
        log.warning("%s: %s", self.spec.name, log_name(exc))
        self._on_error(self.spec.name, self._name(path), exc, None)

    def _fault(self, path: str, exc: BaseException) -> None:
        """An unexpected error while taking ``path``: reported once; the source goes on.

        The file is quarantined by the caller (``path`` given to the error sink), but for a
        keep folder's: that is left where it is (the fault may be the agent's own).
        """
        log.error("%s: %s: %s", self.spec.name, log_name(path), exc, exc_info=exc)
        self.files.forget(path)
        try:
            lst: os.stat_result | None = os.lstat(path)
        except OSError:
            lst = None
        if lst is not None and not self.files.refuse(path, _entry(lst)):
            return
        self.stats.errors += 1
        fault = IntakeFault(path, exc, kept=self.spec.keep)
        moved = Path(path) if lst is not None and fault.quarantine else None
        self._on_error(self.spec.name, self._name(path), fault, moved)

    def _forget(self, path: str) -> None:
        self.files.forget(path)

    def _gone(self, path: str) -> None:
        """An event: ``path`` was deleted or renamed away."""
        self.files.gone(path)

    def _rescan_if_room(self) -> None:
        """Go on with the pass over the folder; start another when notices were dropped."""
        if self._scan is not None:
            self._feed_scan()
        elif self.files.rescan_due():
            self.rescans += 1
            self._initial_scan()
        elif self._rescanned and time.monotonic() >= self._deep_rescan_at:
            self._deep_rescan_at = time.monotonic() + self.spec.poll_interval
            self._initial_scan()

    def _entries(self) -> Iterator[str]:
        """The folder's entries, read lazily (a pass holds one directory stream, not a list)."""
        if self.spec.recursive:
            yield from self._walk()
            return
        with os.scandir(self.spec.path) as it:
            for entry in it:
                yield entry.path

    def _walk(self) -> Iterator[str]:
        """The tree's entries but folders; an unreadable subfolder is not entered: that state.

        Links to folders are entries, not followed into. The top folder's errors are the
        caller's (:meth:`_feed_scan`).
        """
        top = str(self.spec.path)
        stack = [top]
        self.subfolders.walk_started()
        while stack:
            folder = stack.pop()
            why = None if folder == top else unreadable_why(folder)
            if why is not None:
                self._subfolder_unreadable(folder, why)
                continue
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            yield entry.path
            except OSError as exc:
                if folder == top:
                    raise
                if isinstance(exc, PermissionError):
                    self._subfolder_unreadable(folder, exc.strerror or str(exc))

    def _initial_scan(self) -> None:
        """Start a full pass over the folder: every candidate noticed as not complete yet.

        Files present at start (or found by a rescan) are judged by an identity stable for
        ``stable_seconds``. The pass notices entries only while the pending set has room and
        goes on where it stopped as files are taken (:meth:`_feed_scan`): each entry is
        looked at once per pass, so a folder of N files drains in time linear in N.
        """
        self._scan = self._entries()
        self._feed_scan()

    def _feed_scan(self) -> None:
        """Notice the next entries of the pass while there is room; at its end, prune.

        The end of a pass forgets the kept files that are gone or changed.
        """
        scan = self._scan
        while scan is not None and self.files.room:
            try:
                path = next(scan, None)
            except OSError as exc:  # the folder went away: the watch's check re-arms it
                if isinstance(exc, PermissionError):  # or cannot be listed: that state
                    self._denied()
                    self._scan = None
                    return
                log.warning(
                    "%s: scan of %s stopped: %s", self.spec.name, log_name(self.spec.path), exc
                )
                self._scan = None
                return
            if path is None:
                self._scan = None
                self.files.prune_kept()
                return
            if is_candidate(os.path.basename(path), self.spec.patterns):
                try:
                    self._notice(path, closed=False)
                except Exception as exc:
                    self._fault(path, exc)

    # -- the scanner -----------------------------------------------------------------------
    def _run(self) -> None:
        """The supervised part: (re)arm the watch unless :meth:`start` just did, then scan."""
        if self._stopped.is_set():
            return
        if not self._armed:
            self._arm()
        self._armed = False  # a restart arms a new watch
        try:
            self._loop()
        finally:
            if self._stopped.is_set():
                self._disarm()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            if not self._folder_readable():
                self._wait(poll=True)
                continue
            if not self._watch_alive():
                raise WatchLost(
                    self.spec.path, "the watch stopped (folder deleted, moved or unmounted)"
                )
            self._check_suspects()
            if self.spec.recursive:
                self._check_subfolders()
            self._rescan_if_room()
            self.files.flush_kept()  # what the record held while its disk was full
            ready = [] if self._paused else self.files.ready()
            blocked = self._paused
            for path in ready:
                if self._stopped.is_set() or self._paused:
                    break
                if not self._take_safely(path):
                    self.stats.paused += 1
                    blocked = True
                    break  # budget full: keep the rest on disk, retry next scan
            self._wait(poll=blocked)

    def _take_safely(self, path: str) -> bool:
        try:
            return self._take(path)
        except Exception as exc:
            self._fault(path, exc)
            return True

    def _take(self, path: str) -> bool:
        """Read one complete file into an item; ``False`` when the budget is full."""
        pend, was = self.files.to_take(path)
        if was is not None:  # its rename was noticed before its first take was recorded
            self._count_renamed(path, was)
            return True
        if pend is None:
            return True
        limit = self.max_file_bytes()
        if pend.size > limit:  # never read: the caller quarantines it (see ErrorSink)
            self._forget(path)
            with contextlib.suppress(OSError):  # left in place (too large to quarantine too):
                self.files.refuse(path, _entry(os.lstat(path)))  # reported once, not again
            self.stats.errors += 1
            too_large = FileTooLarge(path, pend.size, limit, kept=self.spec.keep)
            moved = Path(path) if too_large.quarantine else None  # a keep folder's: left
            self._on_error(self.spec.name, self._name(path), too_large, moved)
            return True
        charge = self._budget.cost(pend.size, self.spec.modality)
        if not self._budget.try_acquire(charge):
            return False
        seen_ns = time.time_ns()
        try:
            link = link_at(path) if self._links.follow else None  # the link followed
            data, st = read_regular(path, pend.size + 1, self._links)
        except SourceError as exc:
            self._budget.release(charge)
            self._read_failed(path, exc)
            return True
        except BaseException:
            self._budget.release(charge)
            raise
        read = identity_read(st, seen_ns, link)  # through a link: the link's too
        ident = target_of(read)  # the file read: what the pending set and the record know
        if len(data) > pend.size:  # grew since it was judged complete: still being written
            self._budget.release(charge)
            self.files.requeue(path, ident)  # judged again once stable
            return True
        if len(data) != pend.size:  # shrank since it was judged complete
            self._budget.release(charge)
            charge = self._budget.cost(len(data), self.spec.modality)
            if not self._budget.try_acquire(charge):
                self.files.requeue(path, ident)
                return False
        try:
            item = self._item(path, data, read, pend, charge)
        except BaseException:
            self._budget.release(charge)
            raise
        if self._unreadable_files:
            self._unreadable_files.pop(path, None)  # readable now
        self.files.taken(path, ident, direct=not isinstance(read, LinkedIdentity))
        self.stats.taken += 1
        self.stats.taken_bytes += len(data)
        self._sink(item)  # from here the window holds the charge
        return True

    def _read_failed(self, path: str, exc: SourceError) -> None:
        if isinstance(exc, FileUnreadable):
            self._unreadable_file(path, exc)
            return
        if isinstance(exc, NotRegularFile | LinkRefused):  # not a regular file any more
            try:
                lst: os.stat_result | None = os.lstat(path)
            except OSError:
                lst = None
            self._refuse(path, lst, exc)
            return
        self._forget(path)
        self.stats.errors += 1
        self._on_error(self.spec.name, self._name(path), exc, None)

    def _item(
        self, path: str, data: bytes, ident: FileIdentity, pend: Pending, charge: int
    ) -> Item:
        raw = os.path.relpath(path, self.spec.path)
        mtime = ident.mtime_ns / 1e9
        if mtime - pend.seen > FUTURE_MTIME_S:
            self.stats.future_mtime += 1
            if self.stats.future_mtime == 1:  # a clock gone wrong: said once per source
                log.warning(
                    "%s: %s has an mtime %.0f s ahead of the clock: its ts is when it was seen",
                    self.spec.name,
                    log_name(path),
                    mtime - pend.seen,
                )
        return Item(
            source=self.spec.name,
            name=display_name(raw),
            modality=self.spec.modality,
            ts=arrival_time(mtime, pend.seen),
            data=data,
            item_id=item_id(self.spec.name, raw, len(data), ident.mtime_ns, content=data),
            path=Path(path),
            size=len(data),
            mtime_ns=ident.mtime_ns,
            charge=charge,
            identity=ident,
        )


def _kept_record(spec: FolderSpec) -> KeptFiles:
    """The source's kept-file record; in memory when its file cannot be opened (logged)."""
    if spec.kept_record is not None:
        try:
            return KeptFiles(spec.kept_record)
        except (OSError, sqlite3.Error) as exc:
            log.warning(
                "%s: kept-file record %s cannot be opened (%s): kept in memory, kept files "
                "are scored again after a restart",
                spec.name,
                log_name(spec.kept_record),
                exc,
            )
    return KeptFiles()


def _entry(lst: os.stat_result) -> FileIdentity:
    """What a refused entry is remembered by.

    A regular file by its identity (a new version is judged again), anything else by device,
    inode and type (a FIFO written to is the same FIFO).
    """
    if stat.S_ISREG(lst.st_mode):
        return FileIdentity.of(lst)
    return FileIdentity(lst.st_dev, lst.st_ino, -stat.S_IFMT(lst.st_mode), 0)


def arrival_time(mtime: float, seen: float) -> float:
    """When an item arrived; result latency is measured from here.

    Its mtime (the writer's close), or when the agent first saw it if that mtime is older
    than the sighting by more than OLD_MTIME_S (a file renamed in, or waiting at start) or
    newer by more than FUTURE_MTIME_S (a writer's clock ahead: a ts in 2100 and a latency of
    0 otherwise).
    """
    return seen if seen - mtime > OLD_MTIME_S or mtime - seen > FUTURE_MTIME_S else mtime
