"""The retention ring: a bounded on-disk store of window archives and their results.

:meth:`RetentionRing.store` keeps a window as its archive and its sidecar
(:mod:`~cdml_edge.store.sidecar`), written to temporary files (:mod:`~cdml_edge.store.files`)
and renamed into place archive first, sidecar last; what a crash leaves (an archive without a
sidecar, a temporary file) is removed when the ring opens, and damaged sidecars go to
:mod:`~cdml_edge.store.repair`. The bounds (:mod:`~cdml_edge.store.policy`) evict the oldest
first; a window alone larger than ``max_bytes`` is not kept (``too_large``). A full disk or an
I/O error is a degraded state (:class:`~cdml_edge.fsio.DiskFaults`): the window is not kept,
the episode is reported once and the disk tried again at most every ``retry_s``;
:meth:`RetentionRing.store` never raises into the live path.

The ring owns only what it writes (:func:`~cdml_edge.store.sidecar.ring_name` names, their
temporary names, the catalog and ``corrupt/``); anything else in the folder is left alone and
listed in :attr:`RetentionRing.foreign`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from cdml_edge.fsio import (
    FULL_ERRNOS,
    PROBE_BYTES,
    DiskFaults,
    FaultHook,
    block_size,
    folder_mode,
    make_folder,
    on_disk,
)
from cdml_edge.store.catalog import (
    CATALOG_FILES,
    CATALOG_NAME,
    Catalog,
    WindowRecord,
    special_catalog_files,
)
from cdml_edge.store.files import commit, is_tmp_name, tmp_path, write_file
from cdml_edge.store.ondisk import regular_size
from cdml_edge.store.policy import KeepPolicy, evictions, keeps
from cdml_edge.store.repair import corrupt_files, remove_corrupt, salvage_sidecar
from cdml_edge.store.sidecar import (
    ARCHIVE_SUFFIXES,
    SIDECAR_SUFFIX,
    ArchiveRef,
    RetainedWindow,
    RetentionError,
    archive_names,
    foreign_names,
    read_sidecar,
    ring_folders,
    ring_name,
    safe_record,
    window_record,
    window_stem,
)
from cdml_edge.window.manifest import ItemOutcome, WindowManifest

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import RetentionConfig

log = logging.getLogger(__name__)

EventHook = FaultHook


class StoreStatus(str, Enum):
    """What :meth:`RetentionRing.store` did with a window."""

    STORED = "stored"
    SKIPPED = "skipped"  # the keep policy said no
    TOO_LARGE = "too_large"  # larger than max_bytes on its own
    DISK_FULL = "disk_full"  # ENOSPC / EDQUOT
    FAILED = "failed"  # an I/O error or any other error (logged, counted)


@dataclass(frozen=True)
class StoreResult:
    """What :meth:`RetentionRing.store` did with one window.

    ``file``: the archive written; ``bytes_written``: archive and sidecar bytes; ``evicted``:
    windows removed to make room; ``error``: why the window was not kept.
    """

    status: StoreStatus
    file: Path | None = None
    bytes_written: int = 0
    evicted: int = 0
    error: str | None = None
    # "retention_disk_full" / "retention_io_error" on the first failure of an episode,
    # "retention_disk_ok" on the first store after it; None otherwise
    event: str | None = None

    @property
    def stored(self) -> bool:
        """Whether the window was kept."""
        return self.status is StoreStatus.STORED

    @property
    def lost(self) -> bool:
        """The ring wanted the window but could not write it (full disk, I/O error)."""
        return self.status in (StoreStatus.DISK_FULL, StoreStatus.FAILED)


def catalog_fault(exc: sqlite3.Error) -> OSError:
    """A catalog error as the disk error it stands for: ENOSPC when SQLite found it full."""
    full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return OSError(errno.ENOSPC if full else errno.EIO, f"catalog: {exc}")


class RetentionRing:
    """Bounded ring of retained windows in ``directory`` (created if needed).

    ``max_bytes`` bounds the disk space of the windows' archives and sidecars, each file
    counted in whole blocks of the folder's file system, ``corrupt/`` and the catalog
    included.
    """

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
        retry_s: float = 1.0,
        mode: int = 0o600,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"retention.max_bytes must be > 0 (got {max_bytes})")
        self.dir = Path(directory)
        self.mode = mode
        make_folder(self.dir, folder_mode(mode))
        self.block = block_size(self.dir)  # the bound counts whole blocks (fsio.space)
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.keep = keep
        self.sample_percent = sample_percent
        self.clock = clock
        self.fsync = fsync
        self._lock = threading.Lock()
        self.faults = DiskFaults(
            "retention",
            self.dir,
            retry_s=retry_s,
            on_event=on_event,
            probe=self._probe_disk,
            probe_ops=("store",),
        )
        self._fault_status = StoreStatus.DISK_FULL  # what a paced (untried) store reports
        self.foreign: list[str] = []  # entries the ring did not write (left alone)
        self.ignored_rows = 0  # catalog rows pointing outside the ring (never acted on)
        self._ignored_bytes = 0  # what those rows claim (not counted against max_bytes)
        self._refused_corrupt: str | None = None  # why corrupt/ is not used (logged once)
        self._too_large_said_at: float | None = None  # the last "too large" line (clock)
        self._too_large_unsaid = 0  # windows too large since that line
        self._evicted_now = 0  # windows the eviction under way has removed
        self.counters: dict[str, int] = {
            "stored": 0,
            "withdrawn": 0,
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
        self.catalog = self._open_catalog()
        self.reconcile(full=self.catalog.fresh)
        if self.catalog.fresh:  # rebuilt from the sidecars (an old schema counted lengths):
            self.evict()  # within its bounds now, not only when the next window comes

    def _open_catalog(self) -> Catalog:
        """The catalog, its file given the ring's mode (SQLite's journals follow it).

        A link, FIFO or device under a catalog file's name is removed first (the entry
        itself, never what it points to), so the catalog is rebuilt from the sidecars; a
        folder there is :class:`RetentionError` (it is not the ring's to remove).
        """
        for name, kind in special_catalog_files(self.dir).items():
            if os.path.isdir(self.dir / name) and not os.path.islink(self.dir / name):
                raise RetentionError(self.dir / name, "a folder where the catalog goes")
            log.warning("retention: %s in %s is %s: removed, never opened", name, self.dir, kind)
            os.unlink(self.dir / name)
        catalog = Catalog(self.dir / CATALOG_NAME)
        path = self.dir / CATALOG_NAME
        if path.exists() and os.stat(path).st_mode & 0o777 != self.mode:
            os.chmod(path, self.mode)
        return catalog

    @property
    def degraded(self) -> str | None:
        """Why the ring cannot write now (``None`` when it can)."""
        return self.faults.degraded

    @classmethod
    def from_config(cls, cfg: RetentionConfig, on_event: EventHook | None = None) -> RetentionRing:
        """The ring the ``retention`` section of the configuration describes."""
        return cls(
            cfg.dir,
            max_bytes=cfg.max_bytes,
            max_age=cfg.max_age,
            keep=cfg.keep,
            sample_percent=cfg.sample_percent,
            on_event=on_event,
            mode=cfg.file_mode,
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
        need = on_disk(len(archive), self.block) + on_disk(len(sidecar), self.block)
        catalog = self._catalog_bytes()
        if need + catalog > self.max_bytes:  # the catalog is never evicted: it takes its room
            error = self._too_large(need, archive, sidecar, catalog)
            self._say_too_large(manifest.window_id, error)
            return StoreResult(StoreStatus.TOO_LARGE, error=error)
        if not self.faults.may_try("store"):  # degraded: the next attempt is not due yet
            return StoreResult(self._fault_status, error=self.faults.degraded)
        try:
            evicted = self._evict_locked(need)
        except sqlite3.Error as exc:  # a full disk: SQLite's journal needs room to delete
            return self._fault(manifest.window_id, catalog_fault(exc), self._evicted_now)
        try:
            self._write_pair(archive_name, archive, sidecar_name, sidecar)
        except OSError as exc:
            return self._fault(manifest.window_id, exc, evicted)
        record = window_record(manifest, ref, sidecar_name, need)
        try:
            self.catalog.add(record, manifest)
        except sqlite3.Error as exc:  # not catalogued = not kept: undo the files
            (self.dir / sidecar_name).unlink(missing_ok=True)
            (self.dir / archive_name).unlink(missing_ok=True)
            return self._fault(manifest.window_id, catalog_fault(exc), evicted)
        settled, over = self._settle(manifest.window_id)
        evicted += settled
        if over:  # alone beside the catalog its rows grew: not kept after all
            self._delete(record)
            error = self._too_large(need, archive, sidecar, self._catalog_bytes())
            self._say_too_large(manifest.window_id, error)
            written = len(archive) + len(sidecar)  # on the card all the same
            return StoreResult(
                StoreStatus.TOO_LARGE, bytes_written=written, evicted=evicted, error=error
            )
        event = self.faults.ok("store")
        return StoreResult(
            StoreStatus.STORED,
            file=self.dir / archive_name,
            bytes_written=len(archive) + len(sidecar),
            evicted=evicted,
            event=event,
        )

    def _too_large(self, need: int, archive: bytes, sidecar: bytes, catalog: int) -> str:
        """Why a window is not kept: its files in whole blocks beside the catalog are too many."""
        return (
            f"{need} B on the disk ({len(archive)} B archive + {len(sidecar)} B sidecar in "
            f"{self.block} B blocks) + {catalog} B of catalog > retention.max_bytes "
            f"({self.max_bytes})"
        )

    def _settle(self, window_id: str) -> tuple[int, bool]:
        """Evict for the catalog's growth: the window's rows, added last, may take new pages.

        The room made before the window's files were written could not count them; the
        windows evicted now are others (never ``window_id``), oldest first. Returns how many,
        and whether the ring is still over its bound (``window_id`` alone beside the
        catalog). A catalog error here (a full disk) leaves the window kept and the next
        store evicting.
        """
        try:
            n = self._evict_locked(0, keep=window_id)
        except sqlite3.Error as exc:
            log.warning("retention: eviction after window %s stopped: %s", window_id, exc)
            return self._evicted_now, False
        return n, self._held_bytes() > self.max_bytes

    def _say_too_large(self, window_id: str, error: str) -> None:
        """One WARNING line a minute at most: a bound below every window must not be silent."""
        self._too_large_unsaid += 1
        now = self.clock()
        if self._too_large_said_at is not None and now - self._too_large_said_at < 60.0:
            return
        since = ""
        if self._too_large_said_at is not None:
            since = f" ({self._too_large_unsaid} windows too large since the last line)"
        log.warning("retention: window %s not kept: %s%s", window_id, error, since)
        self._too_large_said_at, self._too_large_unsaid = now, 0

    def _write_pair(
        self, archive_name: str, archive: bytes, sidecar_name: str, sidecar: bytes
    ) -> None:
        """Both files to temporary names (fsynced), then archive and sidecar renamed in."""
        tmp_a, tmp_s = tmp_path(self.dir, archive_name), tmp_path(self.dir, sidecar_name)
        try:
            write_file(tmp_a, archive, fsync=self.fsync, mode=self.mode)
            write_file(tmp_s, sidecar, fsync=self.fsync, mode=self.mode)
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

    def _fault(self, window_id: str, exc: OSError, evicted: int) -> StoreResult:
        """A write failed: degraded (an event when the episode begins), window not kept."""
        full = exc.errno in FULL_ERRNOS
        self._fault_status = StoreStatus.DISK_FULL if full else StoreStatus.FAILED
        log.warning(
            "retention: %s in %s, window %s not kept: %s",
            "disk full" if full else "I/O error",
            self.dir,
            window_id,
            exc,
        )
        event = self.faults.failed("store", exc)
        error = f"{type(exc).__name__}: {exc}"
        return StoreResult(self._fault_status, evicted=evicted, error=error, event=event)

    def _count(self, result: StoreResult) -> StoreResult:
        self.counters[result.status.value] += 1
        self.counters["evicted"] += result.evicted
        self.counters["bytes_written"] += result.bytes_written
        return result

    # -- bounds --------------------------------------------------------------------
    def withdraw(self, window_id: str) -> bool:
        """Delete a window just kept whose results never left: the output refused them.

        Its files are taken again and scored into a window of their own, kept then: without
        this, each refusal left a copy of the same items in the ring (duplicate samples in a
        replay or an export). ``False`` when the ring has no such window. Never raises.
        """
        try:
            with self._lock:
                record = self.catalog.get(window_id)
                if record is None:
                    return False
                self._delete(record)
                self.counters["withdrawn"] += 1
                return True
        except (OSError, sqlite3.Error) as exc:  # the live path must keep going
            log.warning("retention: window %s not withdrawn: %s", window_id, exc)
            return False

    def evict(self) -> int:
        """Apply ``max_age`` and ``max_bytes`` now; returns the number of windows evicted."""
        with self._lock:
            n = self._evict_locked(0)
        self.counters["evicted"] += n
        return n

    def _evict_locked(self, incoming: int, keep: str | None = None) -> int:
        """Evict until the ring with ``incoming`` more bytes fits (``keep``: never evicted)."""
        cutoff = self.clock() - self.max_age if self.max_age is not None else None
        quarantined = self._corrupt_files()
        total = self.catalog.total_bytes() - self._ignored_bytes + sum(q[2] for q in quarantined)
        oldest = (  # read as evicted
            r for r in self.catalog.oldest() if safe_record(r) and r.window_id != keep
        )
        victims = evictions(
            oldest,
            quarantined,
            total=total,
            incoming=incoming,
            max_bytes=max(self.max_bytes - self._catalog_bytes(), 0),
            cutoff=cutoff,
        )
        self._evicted_now = 0  # so far, also when a catalog error stops the loop
        for what in victims:
            if isinstance(what, Path):
                remove_corrupt(self.dir, what.name)
                self.counters["corrupt_evicted"] += 1
            else:
                self._delete(what)
                self._evicted_now += 1
        return self._evicted_now

    def _delete(self, r: WindowRecord) -> None:
        if not safe_record(r):  # never a file a row pointing outside names (nor its partner)
            return
        # the row first: when the catalog cannot change (a full disk) nothing is deleted and
        # it still tells the truth; files left by a crash after it are catalogued again
        self.catalog.remove(r.window_id)
        for name in (r.sidecar, r.file):  # un-commit first; a folder there is not the ring's
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(self.dir / name)

    def _held_bytes(self) -> int:
        """What the bound counts now: windows and quarantined files, and the catalog."""
        quarantined = sum(q[2] for q in self._corrupt_files())
        windows = self.catalog.total_bytes() - self._ignored_bytes
        return windows + quarantined + self._catalog_bytes()

    def _safe_windows(self) -> list[WindowRecord]:
        """The catalog's rows whose files are in the ring; the others are reported, not used.

        A row pointing outside (a tampered or foreign catalog) is never acted on: no file it
        names, nor the sidecar it claims, is deleted for it.
        """
        rows = self.catalog.windows()
        safe = [r for r in rows if safe_record(r)]
        ignored = len(rows) - len(safe)
        self._ignored_bytes = sum(r.bytes for r in rows if not safe_record(r))
        if ignored and ignored != self.ignored_rows:
            bad = [ascii(r.window_id) for r in rows if not safe_record(r)][:5]
            log.warning(
                "retention: %d catalog rows in %s point outside the ring and are ignored: %s",
                ignored,
                self.dir,
                ", ".join(bad),
            )
        self.ignored_rows = ignored
        return safe

    def _catalog_bytes(self) -> int:
        """The catalog's files on the disk: ``max_bytes`` holds them too.

        Their blocks as the file system reports them (SQLite's file may take a block more
        than its length), at least its length in whole blocks.
        """
        total = 0
        for name in CATALOG_FILES:
            with contextlib.suppress(OSError):
                st = os.lstat(self.dir / name)
                total += max(on_disk(st.st_size, self.block), st.st_blocks * 512)
        return total

    def _corrupt_files(self) -> list[tuple[float, Path, int]]:
        """The files in ``corrupt/``; none when it is not a real folder (logged once)."""
        try:
            files = corrupt_files(self.dir)
        except RetentionError as exc:
            if self._refused_corrupt != exc.reason:
                log.warning("retention: %s", exc)
            self._refused_corrupt = exc.reason
            return []
        self._refused_corrupt = None
        return [(mtime, path, on_disk(size, self.block)) for mtime, path, size in files]

    # -- reading -------------------------------------------------------------------
    def windows(
        self, since: float | None = None, until: float | None = None, source: str | None = None
    ) -> list[WindowRecord]:
        """Retained windows in archive order (close time, then id).

        Rows pointing outside the ring are left out (see :meth:`_safe_windows`).
        """
        return [r for r in self.catalog.windows(since, until, source) if safe_record(r)]

    def load(self, record: WindowRecord) -> RetainedWindow:
        """Read a window's sidecar (manifest with results)."""
        return read_sidecar(self.dir / record.sidecar)

    def archive_path(self, record: WindowRecord) -> Path:
        """Where a window's archive lies; a file name outside the ring raises RetentionError."""
        if not safe_record(record):
            raise RetentionError(record.file, "archive file name outside the ring")
        return self.dir / record.file

    def stats(self) -> dict[str, int]:
        """Counters plus current size, for the health topic."""
        return {
            **self.counters,
            "windows": self.catalog.count(),
            "bytes": self.catalog.total_bytes(),
            "corrupt_bytes": sum(q[2] for q in self._corrupt_files()),
            "catalog_bytes": self._catalog_bytes(),
            "ignored_rows": self.ignored_rows,
        }

    def _probe_disk(self) -> None:
        """A small write where the windows go.

        An idle ring on a disk with room again is not left degraded until the next window.
        """
        probe = tmp_path(self.dir, "probe")
        write_file(probe, PROBE_BYTES, fsync=False, mode=self.mode)
        probe.unlink()

    def close(self) -> None:
        """Stop the disk probes and close the catalog."""
        self.faults.close()
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
        names = set(os.listdir(self.dir)) - ring_folders(self.dir)  # folders: not the ring's
        for name in names:
            if is_tmp_name(name):
                (self.dir / name).unlink(missing_ok=True)
        own = {n: parsed for n in names if (parsed := ring_name(n)) is not None}
        sidecars = {n for n, (_stem, sfx) in own.items() if sfx == SIDECAR_SUFFIX}
        known = {} if full else {r.sidecar: r for r in self._safe_windows()}
        for sidecar, r in known.items():
            if sidecar not in sidecars or r.file not in names:
                self._delete(r)
        referenced = {r.file for r in known.values()}
        unknown = sorted(sidecars - known.keys())
        entries = self._read_windows(unknown, names, referenced)  # one window at a time
        if full:
            self.ignored_rows, self._ignored_bytes = 0, 0  # a catalog of the sidecars alone
            added = self.catalog.replace_all(entries)
        else:
            added = 0
            for record, manifest in entries:
                self.catalog.add(record, manifest)
                added += 1
        for name, (_stem, sfx) in own.items():  # our archives whose sidecar never landed
            if sfx != SIDECAR_SUFFIX and name not in referenced:
                log.warning("retention: removing uncommitted archive %s", name)
                (self.dir / name).unlink(missing_ok=True)
        self._note_foreign()
        return added

    def _read_windows(
        self, sidecars: list[str], names: set[str], referenced: set[str]
    ) -> Iterator[tuple[WindowRecord, WindowManifest]]:
        """The catalog entries of ``sidecars``, read one by one (damaged ones salvaged).

        A generator, so a rebuild holds one window's manifest at a time, not the ring's;
        the archive names each sidecar may name are added to ``referenced`` as it goes.
        """
        for sidecar in sidecars:
            path = self.dir / sidecar
            stem = sidecar[: -len(SIDECAR_SUFFIX)]
            referenced.update(archive_names(stem))
            try:
                rw = read_sidecar(path)
                size = regular_size(self.dir / rw.archive.file)
            except RetentionError as exc:
                salvaged = self._salvage(sidecar, names, exc)
                if salvaged is None:
                    continue
                rw = salvaged
                size = rw.archive.bytes
            try:
                nbytes = on_disk(size, self.block) + on_disk(regular_size(path), self.block)
            except RetentionError as exc:
                log.warning("retention: %s", exc)
                continue
            yield window_record(rw.manifest, rw.archive, sidecar, nbytes), rw.manifest

    def _note_foreign(self) -> None:
        """Entries the ring did not write: left alone, listed in :attr:`foreign`, one log line.

        The line shows at most five names, escaped.
        """
        self.foreign = foreign_names(self.dir)
        if self.foreign:
            shown = ", ".join(ascii(n) for n in self.foreign[:5])
            more = f" and {len(self.foreign) - 5} more" if len(self.foreign) > 5 else ""
            log.warning(
                "retention: %d entries in %s are not the ring's and are left alone: %s%s",
                len(self.foreign),
                self.dir,
                shown,
                more,
            )

    def _salvage(self, sidecar: str, names: set[str], exc: Exception) -> RetainedWindow | None:
        """Rebuild a damaged sidecar from its archive's manifest, else quarantine the pair.

        When ``corrupt/`` cannot be used (a link, not a folder) or the disk fails, the
        damaged window is left where it is, not catalogued (logged).
        """
        try:
            rw = salvage_sidecar(
                self.dir,
                sidecar,
                names,
                exc,
                fsync=self.fsync,
                mode=self.mode,
                limit=self.max_bytes,
            )
        except (RetentionError, OSError) as err:
            log.warning("retention: damaged window %s left in place: %s", ascii(sidecar), err)
            return None
        self.counters["rebuilt" if rw is not None else "corrupt"] += 1
        return rw

    def rebuild_catalog(self) -> int:
        """Throw the catalog away and rebuild it from the sidecar files."""
        with self._lock:
            self.catalog.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.dir / CATALOG_NAME) + suffix).unlink(missing_ok=True)
            self.catalog = self._open_catalog()
            return self._reconcile_locked(full=True)


__all__ = ["EventHook", "RetentionRing", "StoreResult", "StoreStatus"]
