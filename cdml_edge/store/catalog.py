"""The retention catalog: a small SQLite index of the retained windows and their items.

The files in the retention folder are the truth; the catalog is a cache of their
sidecar manifests, so it can always be thrown away and rebuilt from them
(:meth:`Catalog.rebuild`). It answers "which windows, in which order, between these
times" without opening every archive, and carries labels and scores per item for
export filters.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.store.ondisk import kind_of
from cdml_edge.window.manifest import WindowManifest

CATALOG_NAME = "catalog.sqlite"
CATALOG_FILES = tuple(CATALOG_NAME + sfx for sfx in ("", "-journal", "-wal", "-shm"))
SCHEMA_VERSION = 2  # 2: ``bytes`` is the disk space (whole blocks), no longer the length

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE windows (
    window_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    device TEXT NOT NULL,
    site TEXT,
    modality TEXT NOT NULL,
    opened_at REAL NOT NULL,
    closed_at REAL NOT NULL,
    n_items INTEGER NOT NULL,
    n_anomalies INTEGER NOT NULL,
    model TEXT,
    model_version TEXT,
    file TEXT NOT NULL,
    sidecar TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE INDEX windows_order ON windows (closed_at, window_id);
CREATE TABLE items (
    window_id TEXT NOT NULL REFERENCES windows (window_id) ON DELETE CASCADE,
    item_id TEXT NOT NULL,
    member TEXT NOT NULL,
    name TEXT NOT NULL,
    ts REAL NOT NULL,
    label TEXT,
    score REAL,
    anomaly INTEGER NOT NULL,
    anomaly_score REAL,
    PRIMARY KEY (window_id, item_id)
);
CREATE INDEX items_label ON items (label);
"""


def special_catalog_files(directory: str | Path) -> dict[str, str]:
    """The catalog's files in ``directory`` that are not regular files, with what they are.

    A link, FIFO or device under the catalog's names is never opened (SQLite would follow a
    link, and block reading a FIFO).
    """
    out = {}
    for name in CATALOG_FILES:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            out[name] = kind_of(mode)
    return out


@dataclass(frozen=True)
class WindowRecord:
    """One catalogued window; ``file``/``sidecar`` are names inside the retention folder."""

    window_id: str
    source: str
    device: str
    site: str | None
    modality: str
    opened_at: float
    closed_at: float
    n_items: int
    n_anomalies: int
    model: str | None
    model_version: str | None
    file: str
    sidecar: str
    bytes: int
    sha256: str


_COLUMNS = ", ".join(WindowRecord.__dataclass_fields__)


class Catalog:
    """SQLite catalog at ``<dir>/catalog.sqlite``; thread-safe (one connection, one lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self.rebuilt_reason: str | None = None
        self._conn = self._open()

    @classmethod
    def read_only(cls, path: str | Path) -> Catalog:
        """Open an existing catalog for reading only (never creates or repairs it)."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(str(p))
        self = cls.__new__(cls)
        self.path = p
        self._lock = threading.RLock()
        self.rebuilt_reason = None
        conn = sqlite3.connect(
            f"{p.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False, timeout=10.0
        )
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or int(row[0]) != SCHEMA_VERSION:
            conn.close()
            raise ValueError(f"{p}: catalog schema {row[0] if row else None}")
        self._conn = conn
        return self

    # -- opening -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=10.0
        )
        # A rollback journal, not WAL: the catalog stays a few pages on disk (a WAL grows by
        # whole pages per commit until a checkpoint), which matters on a nearly full SD card.
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open(self) -> sqlite3.Connection:
        """Open the catalog; recreate it empty if missing, corrupt or of another schema."""
        reason: str | None = None
        if not self.path.exists():
            reason = "missing"
        else:
            try:
                conn = self._connect()
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if row is not None and int(row[0]) == SCHEMA_VERSION:
                    check = conn.execute("PRAGMA quick_check").fetchone()
                    if check is not None and check[0] == "ok":
                        return conn
                    conn.close()
                    raise ValueError(f"quick_check: {check[0] if check else None}")
                conn.close()
                reason = f"schema version {row[0] if row else None}"
            except (sqlite3.DatabaseError, ValueError) as exc:
                reason = f"unreadable ({exc})"
        self.rebuilt_reason = reason
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        conn = self._connect()
        conn.executescript(_SCHEMA)
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        return conn

    @property
    def fresh(self) -> bool:
        """True when the catalog was (re)created empty on open and needs :meth:`rebuild`."""
        return self.rebuilt_reason is not None

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()

    # -- writing -------------------------------------------------------------------
    def add(self, record: WindowRecord, manifest: WindowManifest) -> None:
        """Insert (or replace) a window and its items in one transaction."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                self._insert(conn, record, manifest)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _insert(
        self, conn: sqlite3.Connection, record: WindowRecord, manifest: WindowManifest
    ) -> None:
        conn.execute("DELETE FROM windows WHERE window_id = ?", (record.window_id,))
        placeholders = ", ".join("?" for _ in WindowRecord.__dataclass_fields__)
        conn.execute(
            f"INSERT INTO windows ({_COLUMNS}) VALUES ({placeholders})",
            tuple(getattr(record, f) for f in WindowRecord.__dataclass_fields__),
        )
        rows = []
        for it in manifest.items:
            res = manifest.results.get(it.id)
            rows.append(
                (
                    record.window_id,
                    it.id,
                    it.member,
                    it.name,
                    it.ts,
                    res.label if res else None,
                    res.score if res else None,
                    int(bool(res and res.anomaly)),
                    res.anomaly_score if res else None,
                )
            )
        conn.executemany(
            "INSERT OR REPLACE INTO items (window_id, item_id, member, name, ts, label, score,"
            " anomaly, anomaly_score) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def remove(self, window_id: str) -> None:
        """Delete a window and (cascading) its items; an unknown id is no error."""
        with self._lock:
            self._conn.execute("DELETE FROM windows WHERE window_id = ?", (window_id,))

    def replace_all(self, entries: Iterable[tuple[WindowRecord, WindowManifest]]) -> int:
        """Empty the catalog and insert ``entries`` in one transaction; returns the count."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                conn.execute("DELETE FROM windows")
                n = 0
                for record, manifest in entries:
                    self._insert(conn, record, manifest)
                    n += 1
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return n

    # -- reading -------------------------------------------------------------------
    def windows(
        self,
        since: float | None = None,
        until: float | None = None,
        source: str | None = None,
    ) -> list[WindowRecord]:
        """Windows in archive order (closed_at, then window_id), filtered by close time."""
        sql = f"SELECT {_COLUMNS} FROM windows WHERE 1=1"
        args: list[object] = []
        if since is not None:
            sql += " AND closed_at >= ?"
            args.append(since)
        if until is not None:
            sql += " AND closed_at < ?"
            args.append(until)
        if source is not None:
            sql += " AND source = ?"
            args.append(source)
        sql += " ORDER BY closed_at, window_id"
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [WindowRecord(*row) for row in rows]

    def file_names(self) -> list[tuple[str, str]]:
        """``(sidecar, archive file)`` of every row: which sidecars the catalog knows."""
        with self._lock:
            rows = self._conn.execute("SELECT sidecar, file FROM windows").fetchall()
        return [(str(sc), str(f)) for sc, f in rows]

    def oldest(self, batch: int = 64) -> Iterator[WindowRecord]:
        """Every window in archive order, read ``batch`` rows at a time.

        What eviction walks: only the oldest rows are read, not the whole catalog, and rows
        removed meanwhile do not disturb it (each batch starts after the last row given).
        """
        sql = f"SELECT {_COLUMNS} FROM windows"
        after: tuple[object, ...] = ()
        while True:
            where = " WHERE (closed_at, window_id) > (?, ?)" if after else ""
            with self._lock:
                rows = self._conn.execute(
                    f"{sql}{where} ORDER BY closed_at, window_id LIMIT ?", (*after, batch)
                ).fetchall()
            records = [WindowRecord(*row) for row in rows]
            yield from records
            if len(records) < batch:
                return
            after = (records[-1].closed_at, records[-1].window_id)

    def __iter__(self) -> Iterator[WindowRecord]:
        return iter(self.windows())

    def get(self, window_id: str) -> WindowRecord | None:
        """The record of ``window_id``, or None when the catalog has no such window."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM windows WHERE window_id = ?", (window_id,)
            ).fetchone()
        return WindowRecord(*row) if row else None

    def total_bytes(self) -> int:
        """Bytes of every window (archive + sidecar), summed; 0 when empty."""
        with self._lock:
            row = self._conn.execute("SELECT coalesce(sum(bytes), 0) FROM windows").fetchone()
        return int(row[0])

    def count(self) -> int:
        """How many windows the catalog holds."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM windows").fetchone()[0])

    def label_counts(self) -> dict[str | None, int]:
        """Items per model label over the whole catalog."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT label, count(*) FROM items GROUP BY label ORDER BY label"
            ).fetchall()
        return {label: int(n) for label, n in rows}
