"""The sidecar of a retained window, and reading the ring without writing to it.

Every kept window is two files in the retention folder: ``<stem>.zip`` (or ``.tar.zst``),
the archive bytes exactly as inference read them, and ``<stem>.window.json``, a
:class:`RetainedWindow` — the archive's file name, size and SHA-256, and the window's
:class:`~cdml_edge.window.manifest.WindowManifest` with ``results`` filled in. The sidecar
is the commit marker: an archive without one was never kept.

:func:`read_sidecar` parses one sidecar and checks that it names its own archive;
:func:`list_retained` lists the windows in archive order from the catalog (or, when that is
missing or unreadable, from the sidecars), safe to call beside a live agent.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cdml_edge.fsio import TMP_PREFIX, block_size, on_disk
from cdml_edge.store.catalog import (
    CATALOG_FILES,
    CATALOG_NAME,
    Catalog,
    WindowRecord,
    special_catalog_files,
)
from cdml_edge.store.ondisk import RetentionError, read_regular, regular_size
from cdml_edge.window.manifest import ManifestError, WindowManifest, first_invalid

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".window.json"
SIDECAR_MAX_BYTES = 64 * 1024**2  # a larger sidecar is refused before it is read
ARCHIVE_SUFFIXES = {"zip": ".zip", "tar.zst": ".tar.zst"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RING_NAME = re.compile(
    r"^(?P<stem>\d{8}T\d{6}\.\d{3}Z_[A-Za-z0-9._-]{1,120}?)"
    r"(?P<suffix>\.window\.json|\.zip|\.tar\.zst)$"
)


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
        """Parse sidecar JSON; an invalid one raises :class:`RetentionError` naming ``where``."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            field, msg = first_invalid(exc)
            raise RetentionError(where, f"invalid sidecar: {field}: {msg}") from exc


def window_stem(manifest: WindowManifest) -> str:
    """File stem: UTC close time (sortable) + a file-name-safe window id."""
    t = manifest.closed_at
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
    return f"{stamp}_{_UNSAFE.sub('_', manifest.window_id)[:120]}"


def ring_name(name: str) -> tuple[str, str] | None:
    """``(stem, suffix)`` when ``name`` is a file name the ring writes, else ``None``.

    The ring writes ``<UTC close time>_<window id>`` + ``.zip`` / ``.tar.zst`` /
    ``.window.json``.
    """
    m = _RING_NAME.match(name)
    return (m["stem"], m["suffix"]) if m else None


CORRUPT_DIR = "corrupt"
"""The ring's folder for damaged windows (see :mod:`cdml_edge.store.repair`)."""

_CATALOG_FILES = set(CATALOG_FILES)


def foreign_names(directory: str | Path) -> list[str]:
    """The entries of a retention folder that the ring did not write (sorted).

    That is anything but its window files, their temporary names, the catalog and
    ``corrupt/``; a folder under a window file's name (an archive unzipped beside itself)
    is not the ring's either. The ring never reads, moves or deletes them.
    """
    out = []
    with os.scandir(directory) as entries:
        for e in entries:
            name = e.name
            bare = name[len(TMP_PREFIX) :] if name.startswith(TMP_PREFIX) else name
            if name in _CATALOG_FILES or name == CORRUPT_DIR:
                continue
            if ring_name(bare) is None or _real_folder(e):
                out.append(name)
    return sorted(out)


def ring_folders(directory: str | Path) -> set[str]:
    """The real folders (never links) of ``directory`` named as the ring's files are.

    Not the ring's: never read, moved or deleted (see :func:`foreign_names`).
    """
    with os.scandir(directory) as entries:
        return {
            e.name
            for e in entries
            if _real_folder(e)
            and ring_name(e.name[len(TMP_PREFIX) :] if e.name.startswith(TMP_PREFIX) else e.name)
        }


def _real_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:  # gone meanwhile
        return False


def archive_names(stem: str) -> set[str]:
    """The archive file names a sidecar of ``stem`` may name (one per format)."""
    return {stem + sfx for sfx in ARCHIVE_SUFFIXES.values()}


def read_sidecar(path: str | Path) -> RetainedWindow:
    """Parse a ``.window.json`` sidecar; :class:`RetentionError` names the file."""
    p = Path(path)
    return parse_sidecar(read_regular(p, SIDECAR_MAX_BYTES), str(p))


def parse_sidecar(data: bytes, where: str) -> RetainedWindow:
    """Parse sidecar bytes read from ``where`` and check that it names its own archive.

    ``where``: a path or URL ending in the sidecar's name; :class:`RetentionError` names it.
    """
    try:
        rw = RetainedWindow.from_bytes(data, where)
    except ManifestError as exc:
        raise RetentionError(where, str(exc)) from exc
    name = where.rsplit("/", 1)[-1]
    stem = name[: -len(SIDECAR_SUFFIX)] if name.endswith(SIDECAR_SUFFIX) else Path(name).stem
    if rw.archive.file not in archive_names(stem):
        raise RetentionError(
            where, f"invalid sidecar: archive.file {rw.archive.file!r} does not match {stem!r}"
        )
    return rw


def safe_record(r: WindowRecord) -> bool:
    """A catalog row whose file names stay inside the ring and belong together."""
    return safe_names(r.sidecar, r.file)


def safe_names(sidecar: str, file: str) -> bool:
    """Whether a row's ``sidecar`` and archive ``file`` stay inside the ring and pair up."""
    stem = sidecar[: -len(SIDECAR_SUFFIX)]
    return (
        sidecar.endswith(SIDECAR_SUFFIX)
        and os.path.basename(sidecar) == sidecar
        and is_plain_archive_name(file)
        and file in archive_names(stem)
    )


def window_record(
    manifest: WindowManifest, ref: ArchiveRef, sidecar: str, nbytes: int
) -> WindowRecord:
    """The catalog row of a retained window (``nbytes``: archive + sidecar, whole blocks)."""
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


@dataclass
class RetainedListing:
    """The windows a listing found, and every entry it skipped with the reason."""

    records: list[WindowRecord] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file or window, reason)


def scan_retained(
    directory: str | Path,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
) -> RetainedListing:
    """Retained windows in archive order, without writing anything (safe beside a live agent).

    Reads the catalog read-only (its rows pointing outside the ring skipped), then the
    sidecars it does not list: the files are the truth, and a catalog copied with the ring
    may be older than its files (or a crash came between a window's commit and its row).
    If the catalog is missing, unreadable or not a regular file, every sidecar is read
    (links, special files and sidecars pointing outside skipped). Files being written
    (temporary names) and uncommitted archives are ignored; a sidecar whose archive is gone
    is listed (its reader counts it missing); what else is skipped is in ``skipped``.
    """
    d = Path(directory)
    if not d.is_dir():
        raise RetentionError(d, "no such retention folder")
    out = RetainedListing()
    known: set[str] = set()
    special = special_catalog_files(d)
    try:
        if special:
            name, kind = next(iter(special.items()))
            raise ValueError(f"{name} is {kind}")
        catalog = Catalog.read_only(d / CATALOG_NAME)
        try:
            rows = catalog.windows(since, until, source)
            named = catalog.file_names()
        finally:
            catalog.close()
        known = {sc for sc, f in named if safe_names(sc, f)}  # the others are read from disk
        out = _from_rows(rows)
    except (sqlite3.Error, FileNotFoundError, ValueError) as exc:
        log.info("retention: catalog of %s not usable (%s); reading the sidecars", d, exc)
    block: int | None = None
    folders = ring_folders(d)  # not the ring's (see foreign_names)
    for name in sorted(os.listdir(d)):
        parsed = ring_name(name)
        if parsed is None or parsed[1] != SIDECAR_SUFFIX or name in known or name in folders:
            continue
        block = block if block is not None else block_size(d)
        try:
            rw = read_sidecar(d / name)
            size = on_disk(_archive_size(d / rw.archive.file), block)
            size += on_disk(regular_size(d / name), block)
        except RetentionError as exc:
            if isinstance(exc.__cause__, FileNotFoundError) and not (d / name).exists():
                continue  # evicted by a live agent since the folder was listed
            at = os.path.basename(exc.file)  # the sidecar's archive, when that is at fault
            out.skipped.append((name, exc.reason if at == name else f"{at}: {exc.reason}"))
            continue
        m = rw.manifest
        if _selected(m, since, until, source):
            out.records.append(window_record(m, rw.archive, name, size))
    out.records.sort(key=lambda r: (r.closed_at, r.window_id))
    return out


def _archive_size(path: Path) -> int:
    """The size of a sidecar's archive; 0 when it is gone.

    Such a window is listed all the same, as from a catalog row: its reader counts it
    ``missing`` (evicted since, or never uploaded), as both replay engines do. A link or
    special file there is :class:`RetentionError` (the window is skipped, named).
    """
    try:
        return regular_size(path)
    except RetentionError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return 0
        raise


def _from_rows(rows: list[WindowRecord]) -> RetainedListing:
    out = RetainedListing()
    for r in rows:
        if safe_record(r):
            out.records.append(r)
        else:
            out.skipped.append((r.window_id, f"catalog row points outside the ring ({r.file!r})"))
    return out


def _selected(
    m: WindowManifest, since: float | None, until: float | None, source: str | None
) -> bool:
    return (
        (since is None or m.closed_at >= since)
        and (until is None or m.closed_at < until)
        and (source is None or m.source == source)
    )


def list_retained(
    directory: str | Path,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
) -> list[WindowRecord]:
    """The windows of :func:`scan_retained`; each entry skipped is logged."""
    listing = scan_retained(directory, since, until, source)
    for name, reason in listing.skipped:
        log.warning("retention: %s skipped: %s", ascii(name), reason)
    return listing.records


__all__ = [
    "ARCHIVE_SUFFIXES",
    "SIDECAR_SUFFIX",
    "ArchiveRef",
    "RetainedWindow",
    "RetainedListing",
    "RetentionError",
    "SIDECAR_MAX_BYTES",
    "CORRUPT_DIR",
    "archive_names",
    "foreign_names",
    "ring_folders",
    "is_plain_archive_name",
    "list_retained",
    "parse_sidecar",
    "read_sidecar",
    "ring_name",
    "safe_names",
    "safe_record",
    "scan_retained",
    "window_record",
    "window_stem",
]
