"""The retention ring: a bounded on-disk store of window archives and their results.

Every kept window becomes two files in ``retention.dir`` (see :mod:`cdml_edge.store.sidecar`):
the archive bytes exactly as inference read them, and the ``.window.json`` sidecar with the
window's manifest and results. Both are written to temporary files and fsynced, then the
archive is renamed into place and the sidecar last: the sidecar is the commit marker. A crash
leaves at worst an archive without a sidecar or a temporary file; both are removed when the
ring opens. The SQLite :class:`~cdml_edge.store.catalog.Catalog` indexes the sidecars and is
rebuilt from them when it is missing or unreadable; damaged sidecars are rebuilt or
quarantined by :mod:`cdml_edge.store.repair` (counters ``rebuilt`` / ``corrupt``).

Bounds: ``max_bytes`` (archive + sidecar bytes of all windows, plus the files in
``corrupt/``) and ``max_age`` (since a window closed; a quarantined file's age is its
mtime); the oldest windows and quarantined files are evicted first. Full policy: a
window that alone is larger than ``max_bytes`` is not kept (``too_large``); a full disk
(``ENOSPC``/``EDQUOT``) is counted, reported once per episode through ``on_event`` and
the window is not kept (``disk_full``). :meth:`RetentionRing.store` never raises into the live path.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdml_edge.store.catalog import CATALOG_NAME, Catalog, WindowRecord
from cdml_edge.store.files import commit, is_tmp_name, tmp_path, write_file
from cdml_edge.store.policy import KeepPolicy, eviction_order, keeps
from cdml_edge.store.repair import quarantined_files, salvage_sidecar
from cdml_edge.store.sidecar import (
    ARCHIVE_SUFFIXES,
    SIDECAR_SUFFIX,
    ArchiveRef,
    RetainedWindow,
    RetentionError,
    archive_names,
    is_plain_archive_name,
    read_sidecar,
    safe_record,
    window_record,
    window_stem,
)
from cdml_edge.window.manifest import ItemOutcome, WindowManifest

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import RetentionConfig

log = logging.getLogger(__name__)

_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}

EventHook = Callable[[str, dict[str, Any]], None]


class StoreStatus(str, Enum):
    """What :meth:`RetentionRing.store` did with a window."""

    STORED = "stored"
    SKIPPED = "skipped"  # the keep policy said no
    TOO_LARGE = "too_large"  # larger than max_bytes on its own
    DISK_FULL = "disk_full"  # ENOSPC / EDQUOT
    FAILED = "failed"  # any other error (logged, counted)


@dataclass(frozen=True)
class StoreResult:
    status: StoreStatus
    file: Path | None = None
    bytes_written: int = 0
    evicted: int = 0
    error: str | None = None
    # "retention_disk_full" on the first failure of a full-disk episode,
    # "retention_disk_ok" on the first store after it; None otherwise
    event: str | None = None

    @property
    def stored(self) -> bool:
        return self.status is StoreStatus.STORED


class RetentionRing:
    """Bounded ring of retained windows in ``directory`` (created if needed)."""

    def __init__(
        self,
        directory: str | Path,
        max_bytes: int,
        max_age: float | None = None,
        keep: KeepPolicy = "all",
        sample_percent: float = 10.0,
        on_event: EventHook | None = None,
        clock: Callable[[], float] = time.time,
        fsync: bool = True,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"retention.max_bytes must be > 0 (got {max_bytes})")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.keep = keep
        self.sample_percent = sample_percent
        self.on_event = on_event
        self.clock = clock
        self.fsync = fsync
        self._lock = threading.Lock()
        self._full = False  # inside a disk-full episode (event sent once per episode)
        self.counters: dict[str, int] = {
            "stored": 0,
            "skipped": 0,
            "too_large": 0,
            "disk_full": 0,
            "failed": 0,
            "evicted": 0,
            "bytes_written": 0,
            "rebuilt": 0,  # damaged sidecars rebuilt from the archive's manifest
            "corrupt": 0,  # damaged windows moved to corrupt/
            "corrupt_evicted": 0,  # quarantined files removed by the bounds
        }
        self.catalog = Catalog(self.dir / CATALOG_NAME)
        self.reconcile(full=self.catalog.fresh)

    @classmethod
    def from_config(cls, cfg: RetentionConfig, on_event: EventHook | None = None) -> RetentionRing:
        return cls(
            cfg.dir,
            max_bytes=cfg.max_bytes,
            max_age=cfg.max_age,
            keep=cfg.keep,
            sample_percent=cfg.sample_percent,
            on_event=on_event,
        )

    # -- the live path -------------------------------------------------------------
    def wants(self, manifest: WindowManifest) -> bool:
        """Whether the keep policy keeps this (scored) window."""
        return keeps(self.keep, self.sample_percent, manifest)

    def store(
        self,
        archive: bytes,
        manifest: WindowManifest,
        results: Mapping[str, ItemOutcome] | None = None,
    ) -> StoreResult:
        """Keep one scored window; never raises (the status says what happened)."""
        try:
            if results is not None:
                manifest = manifest.with_results(dict(results))
            if not self.wants(manifest):
                return self._count(StoreResult(StoreStatus.SKIPPED))
            with self._lock:
                return self._count(self._store_locked(archive, manifest))
        except Exception as exc:  # the live path must keep going
            log.exception("retention: window %s not kept", manifest.window_id)
            return self._count(
                StoreResult(StoreStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            )

    def _store_locked(self, archive: bytes, manifest: WindowManifest) -> StoreResult:
        stem = window_stem(manifest)
        archive_name = stem + ARCHIVE_SUFFIXES[manifest.archive_format]
        sidecar_name = stem + SIDECAR_SUFFIX
        ref = ArchiveRef(
            file=archive_name, bytes=len(archive), sha256=hashlib.sha256(archive).hexdigest()
        )
        sidecar = RetainedWindow(archive=ref, manifest=manifest).to_bytes()
        need = len(archive) + len(sidecar)
        if need > self.max_bytes:
            return StoreResult(StoreStatus.TOO_LARGE, error=f"{need} B > max_bytes")
        evicted = self._evict_locked(need)
        try:
            self._write_pair(archive_name, archive, sidecar_name, sidecar)
        except OSError as exc:
            if exc.errno in _FULL_ERRNOS:
                return self._disk_full(manifest.window_id, exc, evicted)
            raise
        record = window_record(manifest, ref, sidecar_name, need)
        try:
            self.catalog.add(record, manifest)
        except sqlite3.Error as exc:  # not catalogued = not kept: undo the files
            (self.dir / sidecar_name).unlink(missing_ok=True)
            (self.dir / archive_name).unlink(missing_ok=True)
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                return self._disk_full(manifest.window_id, exc, evicted)
            raise
        event = None
        if self._full:
            self._full = False
            event = "retention_disk_ok"
            self._emit(event, {"dir": str(self.dir)})
        return StoreResult(
            StoreStatus.STORED,
            file=self.dir / archive_name,
            bytes_written=need,
            evicted=evicted,
            event=event,
        )

    def _write_pair(
        self, archive_name: str, archive: bytes, sidecar_name: str, sidecar: bytes
    ) -> None:
        """Both files to temporary names (fsynced), then archive and sidecar renamed in."""
        tmp_a, tmp_s = tmp_path(self.dir, archive_name), tmp_path(self.dir, sidecar_name)
        try:
            write_file(tmp_a, archive, fsync=self.fsync)
            write_file(tmp_s, sidecar, fsync=self.fsync)
            commit(
                self.dir,
                [(tmp_a, self.dir / archive_name), (tmp_s, self.dir / sidecar_name)],
                fsync=self.fsync,
            )
        except BaseException:
            for p in (tmp_a, tmp_s):
                p.unlink(missing_ok=True)
            if not (self.dir / sidecar_name).exists():
                (self.dir / archive_name).unlink(missing_ok=True)
            raise

    def _disk_full(self, window_id: str, exc: Exception, evicted: int) -> StoreResult:
        log.warning("retention: disk full in %s, window %s not kept: %s", self.dir, window_id, exc)
        event = None
        if not self._full:
            self._full = True
            event = "retention_disk_full"
            self._emit(event, {"dir": str(self.dir), "window_id": window_id, "error": str(exc)})
        return StoreResult(StoreStatus.DISK_FULL, evicted=evicted, error=str(exc), event=event)

    def _emit(self, kind: str, info: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, info)
        except Exception:  # a broken hook must not break the live path
            log.exception("retention: event hook failed for %s", kind)

    def _count(self, result: StoreResult) -> StoreResult:
        self.counters[result.status.value] += 1
        self.counters["evicted"] += result.evicted
        self.counters["bytes_written"] += result.bytes_written
        return result

    # -- bounds --------------------------------------------------------------------
    def evict(self) -> int:
        """Apply ``max_age`` and ``max_bytes`` now; returns the number of windows evicted."""
        with self._lock:
            n = self._evict_locked(0)
        self.counters["evicted"] += n
        return n

    def _evict_locked(self, incoming: int) -> int:
        cutoff = self.clock() - self.max_age if self.max_age is not None else None
        victims = eviction_order(
            self.catalog.windows(),
            quarantined_files(self.dir),
            incoming=incoming,
            max_bytes=self.max_bytes,
            cutoff=cutoff,
        )
        n = 0
        for what in victims:
            if isinstance(what, Path):
                what.unlink(missing_ok=True)
                self.counters["corrupt_evicted"] += 1
            else:
                self._delete(what)
                n += 1
        return n

    def _delete(self, r: WindowRecord) -> None:
        if r.sidecar.endswith(SIDECAR_SUFFIX) and os.path.basename(r.sidecar) == r.sidecar:
            (self.dir / r.sidecar).unlink(missing_ok=True)  # un-commit first
        if is_plain_archive_name(r.file):  # never a path outside the ring
            (self.dir / r.file).unlink(missing_ok=True)
        self.catalog.remove(r.window_id)

    # -- reading -------------------------------------------------------------------
    def windows(
        self, since: float | None = None, until: float | None = None, source: str | None = None
    ) -> list[WindowRecord]:
        """Retained windows in archive order (close time, then id)."""
        return self.catalog.windows(since, until, source)

    def load(self, record: WindowRecord) -> RetainedWindow:
        """Read a window's sidecar (manifest with results)."""
        return read_sidecar(self.dir / record.sidecar)

    def archive_path(self, record: WindowRecord) -> Path:
        if not safe_record(record):
            raise RetentionError(record.file, "archive file name outside the ring")
        return self.dir / record.file

    def stats(self) -> dict[str, int]:
        """Counters plus current size, for the health topic."""
        return {
            **self.counters,
            "windows": self.catalog.count(),
            "bytes": self.catalog.total_bytes(),
            "corrupt_bytes": sum(q[2] for q in quarantined_files(self.dir)),
        }

    def close(self) -> None:
        self.catalog.close()

    # -- recovery ------------------------------------------------------------------
    def reconcile(self, full: bool = False) -> int:
        """Make the catalog match the files; remove debris of interrupted writes.

        ``full`` re-reads every sidecar (used when the catalog was lost); otherwise only
        sidecars the catalog does not know are read. Returns windows added.
        """
        with self._lock:
            return self._reconcile_locked(full)

    def _reconcile_locked(self, full: bool) -> int:
        names = set(os.listdir(self.dir))
        for name in names:
            if is_tmp_name(name):
                (self.dir / name).unlink(missing_ok=True)
        sidecars = {n for n in names if n.endswith(SIDECAR_SUFFIX) and not n.startswith(".")}
        known = {} if full else {r.sidecar: r for r in self.catalog.windows()}
        for sidecar, r in known.items():
            if sidecar not in sidecars or r.file not in names:
                self._delete(r)
        entries: list[tuple[WindowRecord, WindowManifest]] = []
        referenced = {r.file for r in known.values()}
        for sidecar in sorted(sidecars):
            if sidecar in known:
                continue
            path = self.dir / sidecar
            stem = sidecar[: -len(SIDECAR_SUFFIX)]
            referenced.update(archive_names(stem))
            try:
                rw = read_sidecar(path)
                size = (self.dir / rw.archive.file).stat().st_size
            except (RetentionError, OSError) as exc:
                salvaged = self._salvage(sidecar, names, exc)
                if salvaged is None:
                    continue
                rw = salvaged
                size = rw.archive.bytes
            nbytes = size + path.stat().st_size
            entries.append((window_record(rw.manifest, rw.archive, sidecar, nbytes), rw.manifest))
        for name in names:  # archives whose sidecar never landed
            is_archive = name.endswith(tuple(ARCHIVE_SUFFIXES.values()))
            if is_archive and not name.startswith(".") and name not in referenced:
                log.warning("retention: removing uncommitted archive %s", name)
                (self.dir / name).unlink(missing_ok=True)
        if full:
            self.catalog.replace_all(entries)
        else:
            for record, manifest in entries:
                self.catalog.add(record, manifest)
        return len(entries)

    def _salvage(self, sidecar: str, names: set[str], exc: Exception) -> RetainedWindow | None:
        """Rebuild a damaged sidecar from its archive's manifest, else quarantine the pair."""
        rw = salvage_sidecar(self.dir, sidecar, names, exc, fsync=self.fsync)
        self.counters["rebuilt" if rw is not None else "corrupt"] += 1
        return rw

    def rebuild_catalog(self) -> int:
        """Throw the catalog away and rebuild it from the sidecar files."""
        with self._lock:
            self.catalog.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.dir / CATALOG_NAME) + suffix).unlink(missing_ok=True)
            self.catalog = Catalog(self.dir / CATALOG_NAME)
            return self._reconcile_locked(full=True)


__all__ = ["EventHook", "RetentionRing", "StoreResult", "StoreStatus"]
