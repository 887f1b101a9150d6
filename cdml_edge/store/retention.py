"""The retention ring: a bounded on-disk store of window archives and their results.

Every kept window becomes two files in ``retention.dir``, written by one atomic step:

* ``<stamp>_<window_id>.zip`` (or ``.tar.zst``): the archive bytes exactly as inference
  read them (same SHA-256 as published on the ``window`` topic);
* ``<stamp>_<window_id>.window.json``: a :class:`RetainedWindow` — the archive's file
  name, size and SHA-256, and the window's :class:`WindowManifest` with ``results``
  filled in.

Both are written to temporary files and fsynced, then the archive is renamed into place
and the sidecar last: the sidecar is the commit marker. A crash leaves at worst an
archive without a sidecar or a temporary file; both are removed when the ring opens.
The SQLite :class:`~cdml_edge.store.catalog.Catalog` indexes the sidecars and is rebuilt
from them when it is missing or unreadable.

A damaged sidecar (unparsable, or naming an archive other than its own) never causes a
deletion: it is rebuilt from the ``manifest.json`` inside its archive (the results are
then lost and the sidecar says so: ``results_lost``), the damaged original being moved to
``corrupt/``; if the archive cannot give its manifest either, the pair is moved to
``corrupt/`` (counters ``rebuilt`` / ``corrupt``).

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
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cdml_edge.errors import CdmlError
from cdml_edge.store.catalog import CATALOG_NAME, Catalog, WindowRecord
from cdml_edge.window.manifest import MANIFEST_NAME, ItemOutcome, ManifestError, WindowManifest

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import RetentionConfig

log = logging.getLogger(__name__)

KeepPolicy = Literal["all", "anomalies", "sample", "none"]
SIDECAR_SUFFIX = ".window.json"
ARCHIVE_SUFFIXES = {"zip": ".zip", "tar.zst": ".tar.zst"}
_TMP_PREFIX = ".tmp-"
CORRUPT_DIR = "corrupt"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}

EventHook = Callable[[str, dict[str, Any]], None]


class RetentionError(CdmlError):
    """A retained window that cannot be read; names the file."""

    def __init__(self, file: str | Path, reason: str) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = str(file)
        self.reason = reason


class ArchiveRef(BaseModel):
    """The retained archive file a sidecar belongs to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    bytes: int = Field(ge=0)
    sha256: str

    @field_validator("file")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not is_plain_archive_name(v):
            raise ValueError(f"not a plain archive file name: {v!r}")
        return v


def is_plain_archive_name(name: str) -> bool:
    """A bare file name (no separator, no ``..``, not hidden) ending in an archive suffix."""
    return (
        bool(name)
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and not name.startswith(".")
        and name.endswith(tuple(ARCHIVE_SUFFIXES.values()))
    )


class RetainedWindow(BaseModel):
    """The sidecar ``<stem>.window.json``: archive reference + manifest with results."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    archive: ArchiveRef
    manifest: WindowManifest
    results_lost: bool = False  # rebuilt from the archive's manifest.json after damage

    def to_bytes(self) -> bytes:
        """Canonical bytes: the manifest keeps its own canonical form inside."""
        head = ArchiveRef.model_dump_json(self.archive)
        body = self.manifest.to_bytes().rstrip(b"\n")
        tail = b',"results_lost":true' if self.results_lost else b""
        return b'{"archive":' + head.encode() + b',"manifest":' + body + tail + b"}\n"

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> RetainedWindow:
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise RetentionError(where, f"invalid sidecar: {field}: {first['msg']}") from exc


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


def sample_hit(window_id: str, percent: float) -> bool:
    """Deterministic sampling: the same window id is always in or out."""
    if percent >= 100:
        return True
    if percent <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(window_id.encode()).digest()[:8], "big")
    return (h % 1_000_000) < percent * 10_000


def window_stem(manifest: WindowManifest) -> str:
    """File stem: UTC close time (sortable) + a file-name-safe window id."""
    t = manifest.closed_at
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
    return f"{stamp}_{_UNSAFE.sub('_', manifest.window_id)[:120]}"


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
        if self.keep == "all":
            return True
        if self.keep == "none":
            return False
        if self.keep == "anomalies":
            return manifest.anomalies > 0
        return sample_hit(manifest.window_id, self.sample_percent)

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
        record = _record(manifest, ref, sidecar_name, need)
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
        tmp_a = self.dir / f"{_TMP_PREFIX}{archive_name}"
        tmp_s = self.dir / f"{_TMP_PREFIX}{sidecar_name}"
        try:
            self._write_file(tmp_a, archive)
            self._write_file(tmp_s, sidecar)
            os.replace(tmp_a, self.dir / archive_name)
            os.replace(tmp_s, self.dir / sidecar_name)
            self._fsync_dir()
        except BaseException:
            for p in (tmp_a, tmp_s):
                p.unlink(missing_ok=True)
            if not (self.dir / sidecar_name).exists():
                (self.dir / archive_name).unlink(missing_ok=True)
            raise

    def _write_file(self, path: Path, data: bytes) -> None:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644
        )
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _fsync_dir(self) -> None:
        if not self.fsync:
            return
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
        records = self.catalog.windows()
        quarantined = self._quarantined()
        total = sum(r.bytes for r in records) + sum(q[2] for q in quarantined)
        cutoff = self.clock() - self.max_age if self.max_age is not None else None
        order: list[tuple[float, WindowRecord | Path, int]] = [
            (r.closed_at, r, r.bytes) for r in records
        ]
        order += [(mtime, path, size) for mtime, path, size in quarantined]
        order.sort(key=lambda e: e[0])
        n = 0
        for t, what, size in order:  # oldest first
            expired = cutoff is not None and t < cutoff
            if not expired and total + incoming <= self.max_bytes:
                break
            if isinstance(what, Path):
                what.unlink(missing_ok=True)
                self.counters["corrupt_evicted"] += 1
            else:
                self._delete(what)
                n += 1
            total -= size
        return n

    def _quarantined(self) -> list[tuple[float, Path, int]]:
        """Files in ``corrupt/``: (mtime, path, size)."""
        qdir = self.dir / CORRUPT_DIR
        out = []
        try:
            entries = list(os.scandir(qdir))
        except FileNotFoundError:
            return []
        for e in entries:
            try:
                if e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out.append((st.st_mtime, Path(e.path), st.st_size))
            except OSError:
                continue
        return out

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
        if not _safe_record(record):
            raise RetentionError(record.file, "archive file name outside the ring")
        return self.dir / record.file

    def stats(self) -> dict[str, int]:
        """Counters plus current size, for the health topic."""
        return {
            **self.counters,
            "windows": self.catalog.count(),
            "bytes": self.catalog.total_bytes(),
            "corrupt_bytes": sum(q[2] for q in self._quarantined()),
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
            if name.startswith(_TMP_PREFIX):
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
            referenced.update(stem + sfx for sfx in ARCHIVE_SUFFIXES.values())
            try:
                rw = read_sidecar(path)
                size = (self.dir / rw.archive.file).stat().st_size
            except (RetentionError, OSError) as exc:
                salvaged = self._salvage(sidecar, names, exc)
                if salvaged is None:
                    continue
                rw = salvaged
                size = rw.archive.bytes
            entries.append(
                (_record(rw.manifest, rw.archive, sidecar, size + path.stat().st_size), rw.manifest)
            )
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
        from cdml_edge.archive import open_archive

        stem = sidecar[: -len(SIDECAR_SUFFIX)]
        archives = [stem + sfx for sfx in ARCHIVE_SUFFIXES.values() if stem + sfx in names]
        for fmt, sfx in ARCHIVE_SUFFIXES.items():
            name = stem + sfx
            if name not in archives:
                continue
            try:
                data = (self.dir / name).read_bytes()
                with open_archive(data) as arc:
                    m = WindowManifest.from_bytes(arc.read(MANIFEST_NAME), where=name)
            except Exception as err:  # any damage: fall through to quarantine
                log.warning("retention: %s gives no manifest: %s", name, err)
                continue
            if window_stem(m) != stem or m.archive_format != fmt:
                log.warning("retention: manifest of %s names another window", name)
                continue
            ref = ArchiveRef(file=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
            rw = RetainedWindow(archive=ref, manifest=m, results_lost=True)
            self._quarantine([sidecar])  # the damaged original, for inspection
            tmp = self.dir / f"{_TMP_PREFIX}{sidecar}"
            try:
                self._write_file(tmp, rw.to_bytes())
                os.replace(tmp, self.dir / sidecar)
                self._fsync_dir()
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
            log.warning(
                "retention: sidecar %s rebuilt from %s (results lost): %s", sidecar, name, exc
            )
            self.counters["rebuilt"] += 1
            return rw
        log.warning("retention: window %s is damaged, moved to %s/: %s", stem, CORRUPT_DIR, exc)
        self._quarantine([sidecar, *archives])
        self.counters["corrupt"] += 1
        return None

    def _quarantine(self, names: list[str]) -> None:
        qdir = self.dir / CORRUPT_DIR
        qdir.mkdir(exist_ok=True)
        for name in names:
            src = self.dir / name
            if not src.exists():
                continue
            dst, i = qdir / name, 0
            while dst.exists():
                i += 1
                dst = qdir / f"{name}.{i}"
            os.replace(src, dst)
        self._fsync_dir()

    def rebuild_catalog(self) -> int:
        """Throw the catalog away and rebuild it from the sidecar files."""
        with self._lock:
            self.catalog.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.dir / CATALOG_NAME) + suffix).unlink(missing_ok=True)
            self.catalog = Catalog(self.dir / CATALOG_NAME)
            return self._reconcile_locked(full=True)


def list_retained(
    directory: str | Path,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
) -> list[WindowRecord]:
    """Retained windows in archive order, without writing anything (safe beside a live agent).

    Reads the catalog read-only; if it is missing or unreadable, reads the sidecars
    instead. Files being written (temporary names) and uncommitted archives are ignored.
    """
    d = Path(directory)
    if not d.is_dir():
        raise RetentionError(d, "no such retention folder")
    try:
        catalog = Catalog.read_only(d / CATALOG_NAME)
        try:
            return [r for r in catalog.windows(since, until, source) if _safe_record(r)]
        finally:
            catalog.close()
    except (sqlite3.Error, FileNotFoundError, ValueError) as exc:
        log.info("retention: catalog of %s not usable (%s); reading the sidecars", d, exc)
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(SIDECAR_SUFFIX) or name.startswith("."):
            continue
        try:
            rw = read_sidecar(d / name)
            size = (d / rw.archive.file).stat().st_size + (d / name).stat().st_size
        except (RetentionError, OSError):
            continue
        m = rw.manifest
        if since is not None and m.closed_at < since:
            continue
        if until is not None and m.closed_at >= until:
            continue
        if source is not None and m.source != source:
            continue
        out.append(_record(m, rw.archive, name, size))
    out.sort(key=lambda r: (r.closed_at, r.window_id))
    return out


def read_sidecar(path: str | Path) -> RetainedWindow:
    """Parse a ``.window.json`` sidecar; :class:`RetentionError` names the file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise RetentionError(p, f"cannot read sidecar: {exc.strerror or exc}") from exc
    try:
        rw = RetainedWindow.from_bytes(data, str(p))
    except ManifestError as exc:
        raise RetentionError(p, str(exc)) from exc
    stem = p.name[: -len(SIDECAR_SUFFIX)] if p.name.endswith(SIDECAR_SUFFIX) else p.stem
    if rw.archive.file not in {stem + sfx for sfx in ARCHIVE_SUFFIXES.values()}:
        raise RetentionError(
            p, f"invalid sidecar: archive.file {rw.archive.file!r} does not match {stem!r}"
        )
    return rw


def _safe_record(r: WindowRecord) -> bool:
    """A catalog row whose file names stay inside the ring and belong together."""
    stem = r.sidecar[: -len(SIDECAR_SUFFIX)]
    return (
        r.sidecar.endswith(SIDECAR_SUFFIX)
        and os.path.basename(r.sidecar) == r.sidecar
        and is_plain_archive_name(r.file)
        and r.file in {stem + sfx for sfx in ARCHIVE_SUFFIXES.values()}
    )


def _record(manifest: WindowManifest, ref: ArchiveRef, sidecar: str, nbytes: int) -> WindowRecord:
    return WindowRecord(
        window_id=manifest.window_id,
        source=manifest.source,
        device=manifest.device,
        site=manifest.site,
        modality=manifest.modality,
        opened_at=manifest.opened_at,
        closed_at=manifest.closed_at,
        n_items=len(manifest.items),
        n_anomalies=manifest.anomalies,
        model=manifest.model,
        model_version=manifest.model_version,
        file=ref.file,
        sidecar=sidecar,
        bytes=nbytes,
        sha256=ref.sha256,
    )
