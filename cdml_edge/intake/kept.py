"""The kept-file record of a folder source: files left in place after their window.

With ``on_done: keep`` (the default) a scored file stays in the folder; the record remembers
it by path and identity (device, inode, size, mtime) so an unchanged one is never taken
again — not after a rescan, a lost watch nor a restart. The record is a small SQLite file in
the agent's state folder (``<state_dir>/kept/<source>.sqlite``; in memory for a source
without one). It has no fixed bound: it is bounded by what is in the folder, since a row
goes when its file is deleted or moved away, taken again, or found gone or changed by
:meth:`KeptFiles.prune` (run after every full scan of the folder). Writes are not fsynced
one by one (SQLite WAL, ``synchronous=NORMAL``): a power cut may forget the last few, which
are then scored once more under the same result id (at least once). A record that cannot be
opened is started afresh (logged): every kept file is then scored once more.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from pathlib import Path

from cdml_edge.fsio import log_name
from cdml_edge.window.items import FileIdentity

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kept (path BLOB PRIMARY KEY, dev INTEGER NOT NULL,"
    " ino INTEGER NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL) WITHOUT ROWID"
)
PRUNE_BATCH = 1000


def kept_path(state_dir: Path, source: str) -> Path:
    """Where the kept-file record of ``source`` lives in the state folder."""
    return state_dir / "kept" / f"{source}.sqlite"


class KeptFiles:
    """Paths and identities of the files left in place (thread-safe)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
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
            log.warning(
                "kept-file record %s unreadable (%s): started afresh, kept files are scored "
                "once more",
                log_name(self.path),
                exc,
            )
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        return self._connect()

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def get(self, path: str) -> FileIdentity | None:
        """The identity ``path`` had when it was kept, or None."""
        with self._lock:
            if not self._count:  # the common case with on_done: delete: no query
                return None
            row = self._conn.execute(
                "SELECT dev, ino, size, mtime_ns FROM kept WHERE path = ?", (os.fsencode(path),)
            ).fetchone()
        return FileIdentity(*row) if row else None

    def put(self, path: str, ident: FileIdentity) -> None:
        """Remember ``path`` as kept with ``ident``."""
        key = os.fsencode(path)
        with self._lock:
            known = self._conn.execute("SELECT 1 FROM kept WHERE path = ?", (key,)).fetchone()
            self._conn.execute(
                "INSERT OR REPLACE INTO kept VALUES (?, ?, ?, ?, ?)",
                (key, ident.dev, ident.ino, ident.size, ident.mtime_ns),
            )
            self._count += known is None

    def remove(self, path: str) -> None:
        """Forget ``path`` (deleted, moved away, taken again)."""
        with self._lock:
            if not self._count:
                return
            cur = self._conn.execute("DELETE FROM kept WHERE path = ?", (os.fsencode(path),))
            self._count -= max(cur.rowcount, 0)

    def prune(self) -> int:
        """Forget every file that is gone or changed since it was kept; returns how many."""
        with self._lock:
            rows = self._conn.execute("SELECT path, dev, ino, size, mtime_ns FROM kept").fetchall()
        stale = [row for row in rows if not _unchanged(row[0], FileIdentity(*row[1:]))]
        gone = 0
        for i in range(0, len(stale), PRUNE_BATCH):
            with self._lock:  # only the row as it was read: one kept again meanwhile stays
                before = self._conn.total_changes
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "DELETE FROM kept WHERE path = ? AND dev = ? AND ino = ? AND size = ?"
                    " AND mtime_ns = ?",
                    stale[i : i + PRUNE_BATCH],
                )
                self._conn.execute("COMMIT")
                n = self._conn.total_changes - before
                self._count -= n
                gone += n
        return gone

    def close(self) -> None:
        """Close the record."""
        with self._lock:
            self._conn.close()


def _unchanged(key: bytes, ident: FileIdentity) -> bool:
    """Whether the file at ``key`` is still the one kept (a followed link: its target)."""
    try:
        st = os.stat(key)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and FileIdentity.of(st) == ident


__all__ = ["KeptFiles", "kept_path"]
