"""The subfolders of a ``recursive`` folder source that cannot be read, one state each.

A subfolder the agent may not list or search (``chmod 000``, another owner) cannot be
scanned, and inotify refuses its watch (watchdog skips such a folder silently), so its files
are never announced. :class:`UnreadableSubfolders` remembers each such subfolder (the
topmost one of a branch, at most :data:`MAX_UNREADABLE_DIRS`) with why, so the source reports
it once, shows it in ``degraded``, checks it again every second and, once it can be read (or
is gone), ends its state: the source then watches the tree again and rescans it. Past the
bound, the subfolders not remembered are neither reported nor checked one by one: the
whole tree is watched again and rescanned every :data:`OVERFLOW_RESCAN_S` seconds while
any is found (:meth:`UnreadableSubfolders.overflow_rescan_due`), and ``degraded`` says so.

Folders to look at come from the scan (which does not enter an unreadable one), from a
file in a subfolder that could not be looked up and from watchdog's folder events (a folder
made, moved in or changed mode); those arrive from the observer's thread (:meth:`suspect`)
and are looked at in the source's own thread (:meth:`suspects`). A file that could not be
looked up is kept with its folder (at most :data:`MAX_DENIED` paths, beyond them counted and
the tree rescanned): when the folder is readable again by the time the source looks (a mode
changed for a moment), no state begins, and those files are looked up again.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from cdml_edge.fsio import display_name

MAX_UNREADABLE_DIRS = 1024  # subfolders remembered unreadable (beyond: found by a rescan)
OVERFLOW_RESCAN_S = 30.0  # past the bound: the tree is rescanned this often
MAX_SUSPECTS = 4096  # folders waiting to be looked at (beyond: dropped; the scan finds them)
MAX_DENIED = 4096  # paths kept with the folders to look at (beyond: counted, a rescan finds them)
SHOWN = 5  # subfolders named in ``degraded``


def unreadable_why(folder: Path | str) -> str | None:
    """Why ``folder`` cannot be listed or searched (its permissions), or ``None``.

    One ``open`` of ``folder/.`` for reading: it needs both (``x`` to reach ``.``, ``r`` to
    open it; what ``inotify_add_watch`` needs too). A folder gone is not unreadable.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.path.join(folder, "."), flags)
    except PermissionError as exc:
        return exc.strerror or str(exc)
    except OSError:
        return None
    os.close(fd)
    return None


class UnreadableSubfolders:
    """The unreadable subfolders of one tree, and the folders to look at (thread-safe)."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self._why: dict[str, str] = {}  # subfolder path -> why it cannot be read
        self._suspects: dict[str, dict[str, None]] = {}  # folders to look at -> paths denied
        self._denied = 0  # paths kept in _suspects
        self._past_denied = False  # a path was not kept since suspects() was last asked
        self.denied_dropped = 0  # paths not kept (past MAX_DENIED), all told
        self._beyond = 0  # unreadable subfolders not remembered, found by this walk so far
        self._rescan_at = 0.0  # monotonic time of the next rescan while beyond the bound
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._why)

    def __contains__(self, folder: str) -> bool:
        with self._lock:
            return folder in self._why

    def suspect(self, folder: str, denied: str | None = None) -> None:
        """Look at ``folder`` (and the folders above it) in the source's thread.

        ``denied``: a path in it that could not be looked up, kept to be looked up again.
        """
        with self._lock:
            paths = self._suspects.get(folder)
            if paths is None:
                if len(self._suspects) >= MAX_SUSPECTS:
                    self._past_denied |= denied is not None
                    self.denied_dropped += denied is not None
                    return
                paths = self._suspects[folder] = {}
            if denied is None or denied in paths:
                return
            if self._denied >= MAX_DENIED:
                self._past_denied = True
                self.denied_dropped += 1
                return
            paths[denied] = None
            self._denied += 1

    def suspects(self) -> tuple[list[tuple[str, list[str]]], bool]:
        """The folders to look at now (forgotten here), each with its paths denied.

        And whether a path was not kept (past :data:`MAX_DENIED`): then rescan the tree.
        """
        with self._lock:
            out = [(folder, list(paths)) for folder, paths in self._suspects.items()]
            self._suspects = {}
            past, self._past_denied, self._denied = self._past_denied, False, 0
        return out, past

    def first_unreadable(self, folder: str) -> tuple[str, str] | None:
        """The topmost subfolder from the top down to ``folder`` that cannot be read, and why."""
        try:
            parts = Path(folder).relative_to(self.top).parts
        except ValueError:
            return None
        at = self.top
        for part in parts:
            at = at / part
            why = unreadable_why(at)
            if why is not None:
                return str(at), why
        return None

    def add(self, folder: str, why: str) -> bool:
        """Remember ``folder`` unreadable; ``True`` when it was not already (to report).

        Past :data:`MAX_UNREADABLE_DIRS`: not remembered, not reported; counted, and the
        tree is rescanned every :data:`OVERFLOW_RESCAN_S` (:meth:`overflow_rescan_due`).
        """
        with self._lock:
            if folder in self._why:
                return False
            if len(self._why) >= MAX_UNREADABLE_DIRS:
                if not self._beyond:
                    self._rescan_at = time.monotonic() + OVERFLOW_RESCAN_S
                self._beyond += 1
                return False
            self._why[folder] = why
            return True

    @property
    def beyond(self) -> bool:
        """Whether unreadable subfolders past the bound were found (and not remembered)."""
        with self._lock:
            return self._beyond > 0

    def walk_started(self) -> None:
        """A walk of the whole tree begins: it finds those past the bound again."""
        with self._lock:
            self._beyond = 0

    def overflow_rescan_due(self) -> bool:
        """Past the bound, once every :data:`OVERFLOW_RESCAN_S`: rescan the whole tree now."""
        with self._lock:
            now = time.monotonic()
            if not self._beyond or now < self._rescan_at:
                return False
            self._rescan_at = now + OVERFLOW_RESCAN_S
            return True

    def ended(self) -> list[tuple[str, bool]]:
        """The subfolders readable again or gone (forgotten here), each with ``gone``."""
        with self._lock:
            folders = list(self._why)
        out = [(f, not os.path.isdir(f)) for f in folders if unreadable_why(f) is None]
        with self._lock:
            for folder, _ in out:
                self._why.pop(folder, None)
        return out

    def describe(self) -> str | None:
        """What ``degraded`` says of them, or ``None`` when there are none."""
        with self._lock:
            items = list(self._why.items())
            beyond = self._beyond > 0
        if not items:
            return None
        names = [display_name(os.path.relpath(f, self.top)) for f, _ in items[:SHOWN]]
        left = len(items) - min(len(items), SHOWN)
        more = f" and {left} more" if left else ""
        if beyond:
            rescan = f"found by a rescan of the tree every {OVERFLOW_RESCAN_S:g} s"
            more += f", more past {MAX_UNREADABLE_DIRS} ({rescan})"
        whys = sorted({why for _, why in items})
        return (
            f"subfolder{'s' if len(items) > 1 else ''} unreadable ({', '.join(whys)}): "
            f"{', '.join(names)}{more}: no file taken there until it can be read"
        )
