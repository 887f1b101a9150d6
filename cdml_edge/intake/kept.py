"""The kept-file record of a folder source: files left in place after their window.

With ``on_done: keep`` (the default) a scored file stays in the folder; the record remembers
it by path and identity (device, inode, size, mtime) so an unchanged one is never taken
again — not after a rescan, a lost watch nor a restart. The record is a small SQLite file in
the agent's state folder (``<state_dir>/kept/<source>.sqlite``; in memory for a source
without one). It has no fixed bound: it is bounded by what is in the folder, since a row
goes when its file is deleted or moved away, taken again, or found gone or changed by
:meth:`KeptFiles.prune` (run after every full scan of the folder). Writes are not fsynced
one by one (SQLite WAL, ``synchronous=NORMAL``): a power cut may forget the last few, which
are then scored once more under the same result id (at least once). A record that is not
a database (corrupt) is started afresh (logged): every kept file is then scored once more;
one that cannot be opened for writing (a full disk: ``database or disk is full``) is read as
it is, never deleted. A write that fails fails nothing else: the change is held in memory
(at most ``MAX_UNSAVED``: forgotten files let go first, then the oldest kept ones, scored once
more at the next full scan) and written once a write works again (a record opened read-only
is opened for writing then),
tried at most every ``RETRY_S`` (:meth:`KeptFiles.flush`, called by the source's thread,
and with every change), a warning once per episode, and once more when the source stops
(:meth:`KeptFiles.close`); only a restart while the disk is still full scores those files
once more. A record found damaged while in use is started
afresh too; a query that fails otherwise reads as "not kept" (the file is scored, never
refused). A prune reads ``PRUNE_BATCH`` rows at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdml_edge.fsio import log_name
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kept (path BLOB PRIMARY KEY, dev INTEGER NOT NULL,"
    " ino INTEGER NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL) WITHOUT ROWID"
)
PRUNE_BATCH = 1000
MAX_UNSAVED = 65536  # changes held in memory while the record cannot be written
RETRY_S = 1.0  # while it cannot, a write is tried again at most this often


def kept_path(state_dir: Path, source: str) -> Path:
    """Where the kept-file record of ``source`` lives in the state folder."""
    return state_dir / "kept" / f"{source}.sqlite"


class KeptFiles:
    """Paths and identities of the files left in place (thread-safe)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        # changes the record could not take yet: path -> identity kept, or None (forgotten)
        self._unsaved: OrderedDict[bytes, FileIdentity | None] = OrderedDict()
        self._failing: str | None = None  # why the last write failed (None: writes work)
        self.write_failures = 0
        self.read_failures = 0
        self._retry_at = 0.0  # monotonic time a failing record is written again at the earliest
        self._closed = False  # closed: a later change opens the record again for its write
        self._immutable = False  # opened read-only (a full disk at start): writable later
        self._conn = self._open()
        self._count = int(self._conn.execute("SELECT count(*) FROM kept").fetchone()[0])

    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        if self.path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(_SCHEMA)
        return conn

    def _open(self) -> sqlite3.Connection:
        if self.path is None:
            return self._connect()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            conn = self._connect()
            conn.execute("SELECT count(*) FROM kept").fetchone()
            return conn
        except sqlite3.Error as exc:
            if not _is_damage(exc):  # cannot be written now: a full disk, say
                return self._read_only(self.path, exc)
            log.warning(
                "kept-file record %s unreadable (%s): started afresh, kept files are scored "
                "once more",
                log_name(self.path),
                exc,
            )
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        return self._connect()

    def _read_only(self, path: Path, exc: sqlite3.Error) -> sqlite3.Connection:
        """The record as it is on disk, read only: its writes are held in memory meanwhile.

        What a full disk leaves of the record (it cannot make its ``-shm`` file): read as
        the file holds it (``immutable``: its ``-wal`` not read, so the last few kept files
        may be scored once more). Raises ``exc`` when the record cannot even be read.
        """
        try:
            conn = sqlite3.connect(
                path.absolute().as_uri() + "?immutable=1",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
            )
            conn.execute("SELECT count(*) FROM kept").fetchone()
        except sqlite3.Error:
            raise exc from None
        self._failing = str(exc)
        self._immutable = True
        self._retry_at = time.monotonic() + RETRY_S
        log.warning(
            "kept-file record %s cannot be written (%s): read as it is, kept files are "
            "remembered in memory until it can be",
            log_name(path),
            exc,
        )
        return conn

    def __len__(self) -> int:
        with self._lock:  # while changes are held: kept ones counted, forgotten ones not
            held = sum(1 if v is not None else -1 for v in self._unsaved.values())
            return max(self._count + held, 0)

    def get(self, path: str) -> FileIdentity | None:
        """The identity ``path`` had when it was kept, or None."""
        key = os.fsencode(path)
        with self._lock:
            if self._unsaved and key in self._unsaved:
                return self._unsaved[key]
            if not self._count:  # the common case with on_done: delete: no query
                return None
            rows = self._read_locked(
                "SELECT dev, ino, size, mtime_ns FROM kept WHERE path = ?", (key,)
            )
        return FileIdentity(*rows[0]) if rows else None

    def _read_locked(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """The rows of a query; none when the record cannot be read (see :meth:`_damaged`)."""
        if self._closed:  # its source stopped: the record opened for this query only
            with self._reopened_locked() as opened:
                return self._query_locked(sql, args) if opened else []
        return self._query_locked(sql, args)

    def _query_locked(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        try:
            return list(self._conn.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            self._damaged_locked(exc)
            return []

    @contextlib.contextmanager
    def _reopened_locked(self) -> Iterator[bool]:
        """After :meth:`close`: the record opened for one use, closed again; whether it opened."""
        try:
            self._conn = self._connect()
        except sqlite3.Error as exc:
            self._failed_locked(exc)
            yield False
            return
        try:
            yield True
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()

    def _damaged_locked(self, exc: sqlite3.Error) -> None:
        """A query failed: a damaged record is started afresh, any other failure said once.

        Damaged (``database disk image is malformed``: a worn SD card) it would fail every
        query from now on: its files are deleted and a new record begun, the kept files then
        scored once more, as for a record found damaged at start. What is held in memory is
        written to the new one. Any other error (an I/O error that may pass) reads as "not
        kept", so the file is scored (once more) rather than refused.
        """
        self.read_failures += 1
        if not _is_damage(exc):
            log.log(
                logging.WARNING if self.read_failures == 1 else logging.DEBUG,
                "kept-file record %s cannot be read (%s): files not found in it are scored",
                self._where(),
                exc,
            )
            return
        log.warning(
            "kept-file record %s damaged (%s): started afresh, kept files are scored once more",
            self._where(),
            exc,
        )
        self._rollback_locked()
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        for suffix in ("", "-wal", "-shm", "-journal") if self.path is not None else ():
            with contextlib.suppress(OSError):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
        try:
            self._conn = self._connect()
        except sqlite3.Error:  # not even a new one: in memory until a restart
            self.path = None
            self._conn = self._connect()
        self._count = 0
        self._retry_at = 0.0

    def put(self, path: str, ident: FileIdentity) -> None:
        """Remember ``path`` as kept with ``ident`` (in memory while the record fails)."""
        with self._lock:
            self._change_locked(os.fsencode(path), ident)

    def remove(self, path: str) -> None:
        """Forget ``path`` (deleted, moved away, taken again)."""
        key = os.fsencode(path)
        with self._lock:
            if not self._count and not self._unsaved:
                return
            if not self._count:  # only in memory: nothing to delete in the record
                self._unsaved.pop(key, None)
                return
            self._change_locked(key, None)

    def _change_locked(self, key: bytes, ident: FileIdentity | None) -> None:
        """Write what is held in memory and this change; held in memory when that fails."""
        self._unsaved.pop(key, None)
        self._unsaved[key] = ident
        if self._failing is not None and not self._closed and time.monotonic() < self._retry_at:
            self._trim_locked()  # failing: tried again once a RETRY_S, not at every change
            return
        self._write_held_locked()

    def flush(self) -> bool:
        """Write the changes held in memory once ``RETRY_S`` passed; ``True`` when none is held.

        Called by the source's thread about once a second, so what was held while the disk
        was full reaches it once there is room, without waiting for another change.
        """
        if not self._unsaved:  # the common case: no lock taken
            return True
        with self._lock:
            if not self._unsaved:
                return True
            if self._failing is not None and time.monotonic() < self._retry_at:
                return False
            self._write_held_locked()
            return not self._unsaved

    def _write_held_locked(self) -> None:
        """Write what is held; after :meth:`close` through the record opened for that write."""
        if not self._closed:
            self._write_now_locked()
            return
        with self._reopened_locked() as opened:
            if opened:
                self._write_now_locked()

    def _writable_locked(self) -> bool:
        """The record opened for writing, when it was opened read-only; whether it is."""
        if not self._immutable:
            return True
        try:
            conn = self._connect()
            count = int(conn.execute("SELECT count(*) FROM kept").fetchone()[0])
        except sqlite3.Error as exc:
            self._failed_locked(exc)
            return False
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._conn, self._count, self._immutable = conn, count, False
        return True

    def _write_now_locked(self) -> None:
        """Write what is held in one transaction; held on when the record fails."""
        if not self._writable_locked():
            return
        try:
            delta = self._flush_locked()
        except sqlite3.Error as exc:
            if not _is_damage(exc):  # cannot be written now (a full disk)
                self._rollback_locked()
                self._failed_locked(exc)
                return
            self._damaged_locked(exc)  # a new record takes what is held
            try:
                delta = self._flush_locked()
            except sqlite3.Error as again:
                self._rollback_locked()
                self._failed_locked(again)
                return
        self._unsaved.clear()
        self._count += delta
        if self._failing is not None:
            log.warning("kept-file record %s written again", self._where())
            self._failing = None

    def _flush_locked(self) -> int:
        """Write what is held in memory, one transaction; the change in rows."""
        self._conn.execute("BEGIN")
        delta = sum(self._write_locked(k, v) for k, v in self._unsaved.items())
        self._conn.execute("COMMIT")
        return delta

    def _write_locked(self, key: bytes, ident: FileIdentity | None) -> int:
        """Keep (``ident``) or forget (None) ``key`` in the record; the change in rows."""
        if ident is None:
            cur = self._conn.execute("DELETE FROM kept WHERE path = ?", (key,))
            return -max(cur.rowcount, 0)
        known = self._conn.execute("SELECT 1 FROM kept WHERE path = ?", (key,)).fetchone()
        self._conn.execute(
            "INSERT OR REPLACE INTO kept VALUES (?, ?, ?, ?, ?)",
            (key, ident.dev, ident.ino, ident.size, ident.mtime_ns),
        )
        return int(known is None)

    def _rollback_locked(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # rolled back by SQLite itself already
                self._conn.execute("ROLLBACK")

    def _failed_locked(self, exc: sqlite3.Error) -> None:
        """A write failed: the changes stay in memory (bounded), said once per episode."""
        self.write_failures += 1
        self._retry_at = time.monotonic() + RETRY_S
        self._trim_locked()
        if self._failing is None:
            log.warning(
                "kept-file record %s cannot be written (%s): kept files are remembered in "
                "memory until it can (a restart meanwhile scores them once more)",
                self._where(),
                exc,
            )
        self._failing = str(exc)

    def _trim_locked(self) -> None:
        """Hold at most ``MAX_UNSAVED`` changes: forgotten files go first, oldest first.

        A forget let go leaves the row of a file that is gone (the next prune removes it);
        a kept file let go reads as not kept and is scored once more at the next full scan.
        """
        over = len(self._unsaved) - MAX_UNSAVED
        if over <= 0:
            return
        forgets = list(itertools.islice((k for k, v in self._unsaved.items() if v is None), over))
        for key in forgets:
            del self._unsaved[key]
        while len(self._unsaved) > MAX_UNSAVED:
            self._unsaved.popitem(last=False)

    def _where(self) -> str:
        return log_name(self.path) if self.path is not None else "(in memory)"

    def prune(self) -> int:
        """Forget every file that is gone or changed since it was kept; returns how many.

        The record is read ``PRUNE_BATCH`` rows at a time (in path order), so a prune holds
        one batch, never the whole record. A batch the record cannot delete now (a full disk)
        is left for the next prune.
        """
        self._prune_held()
        gone, after = 0, b""
        while True:
            with self._lock:
                rows = self._read_locked(
                    "SELECT path, dev, ino, size, mtime_ns FROM kept WHERE path > ?"
                    " ORDER BY path LIMIT ?",
                    (after, PRUNE_BATCH),
                )
            if not rows:
                return gone
            after = rows[-1][0]
            stale = [row for row in rows if not _unchanged(row[0], FileIdentity(*row[1:]))]
            if stale:
                with self._lock:  # only the row as it was read: one kept again meanwhile stays
                    n = self._delete_locked(stale)
                if n is None:
                    return gone
                gone += n
            if len(rows) < PRUNE_BATCH:
                return gone

    def _prune_held(self) -> None:
        """Forget the files kept in memory only (the record failing) that are gone or changed."""
        with self._lock:
            held = [(k, v) for k, v in self._unsaved.items() if v is not None]
        for key, ident in held:
            if not _unchanged(key, ident):
                with self._lock:
                    if self._unsaved.get(key) == ident:
                        del self._unsaved[key]

    def _delete_locked(self, rows: list[tuple[bytes, int, int, int, int]]) -> int | None:
        """Delete ``rows`` as they were read; how many went, None when the record failed."""
        if self._closed:  # its source stopped meanwhile: left for the next prune
            return None
        before = self._conn.total_changes
        try:
            self._conn.execute("BEGIN")
            self._conn.executemany(
                "DELETE FROM kept WHERE path = ? AND dev = ? AND ino = ? AND size = ?"
                " AND mtime_ns = ?",
                rows,
            )
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if _is_damage(exc):
                self._damaged_locked(exc)
            else:
                self._rollback_locked()
                self._failed_locked(exc)
            return None
        n = self._conn.total_changes - before
        self._count -= n
        self._retry_at = 0.0  # the record is written again: so may what is held
        return n

    def close(self) -> None:
        """Write what is held in memory (whatever the retry delay), then close the record.

        The source's stop calls it: a change held while the disk was full reaches the disk
        by then, or a restart would score its file once more. A change after the close (a
        window drained after its source stopped) opens the record again for its write. A
        record in memory only is kept open (it would be lost).
        """
        with self._lock:
            if self._closed:
                return
            if self._unsaved:
                self._write_now_locked()
            if self.path is None:
                return
            self._closed = True
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()


_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB


def _is_damage(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the record's file is damaged (not a full disk, a closed record).

    By SQLite's error code (Python 3.11+), else as Python maps those codes: a plain
    ``DatabaseError``, none of its subclasses.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _DAMAGE_CODES
    return type(exc) is sqlite3.DatabaseError


def _unchanged(key: bytes, ident: FileIdentity) -> bool:
    """Whether the file at ``key`` is still the one kept (a followed link: its target).

    One that cannot be looked up for a lack of permission (its folder made unreadable just
    after a scan) counts as unchanged: forgetting it would score it again once readable.
    """
    try:
        st = os.stat(key)
    except PermissionError:
        return True
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and FileIdentity.of(st) == ident


__all__ = ["KeptFiles", "kept_path"]
