"""Retained windows -> a training archive laid out for ``CDMLStreamDataset(labels="folder")``.

Layout: ``<class>/<stem>_<id12><ext>``, or with a split ``train/<class>/…``, ``val/…``,
``test/…``. The member bytes are the retained bytes, checked against the SHA-256 in the
window manifest. ``manifest.json`` at the root (outside every class folder, so the
dataset leaves it out) records the provenance of each member: window, device, source,
time, model and version, model label and score, the human label if one was given.

Deterministic: the same windows, filters, relabels and split give a byte-identical
archive (members sorted by name, one fixed member time — the newest window's close time —
and the split decided by hashing each item id). Unsafe member names (a label with ``/``
or ``..``, a hidden name) are never written: such items are skipped and counted.

Memory: members are collected, then written in one go by
:func:`cdml_edge.archive.write_archive`; the selected bytes are bounded by ``max_bytes``
(checked before any archive is read) — narrow the selection with ``--since``/``--filter``
or raise the bound.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdml_edge.fsio import staged_path
from cdml_edge.retrain.errors import ExportError
from cdml_edge.retrain.filters import ItemFilter
from cdml_edge.retrain.held import ring_contents, unknown_source
from cdml_edge.retrain.layout import SPLIT_NAMES, member_name, split_of
from cdml_edge.retrain.outfile import cannot_write, sweep_stale_temps
from cdml_edge.retrain.relabels import Relabels
from cdml_edge.retrain.replay import duplicate_note, missing_note
from cdml_edge.store.catalog import WindowRecord
from cdml_edge.store.ondisk import read_regular, regular_size
from cdml_edge.store.sidecar import RetentionError, read_sidecar, scan_retained
from cdml_edge.window.manifest import ManifestItem, WindowManifest

FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 2 * 1024**3
Progress = Callable[[int], None]


@dataclass
class ExportStats:
    """What an export did (every item seen lands in exactly one counter)."""

    windows: int = 0
    items_seen: int = 0
    exported: int = 0
    filtered: int = 0  # did not match --filter
    unlabelled: int = 0  # no model label and no relabel
    dropped: int = 0  # relabelled with an empty label
    unsafe: int = 0  # would have made an unsafe member name
    corrupt: int = 0  # unreadable, or bytes that do not match the manifest SHA-256
    duplicates: int = 0  # an item (same id) an earlier window already gave
    missing_windows: int = 0  # its archive (or sidecar) gone: evicted, never uploaded
    duplicate_windows: int = 0  # a copy of a window already taken (the same archive SHA-256)
    refused: list[str] = field(default_factory=list)  # windows skipped, each with its reason
    notes: list[str] = field(default_factory=list)  # each missing or duplicate window, named
    relabelled: int = 0
    relabels_unused: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    classes: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        """Input megabytes (10**6 bytes) per second; 0.0 when no time was measured."""
        return self.bytes_in / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def refuse(self, what: str, reason: str) -> None:
        """A window skipped for what it is on disk (outside the ring, a link, damaged)."""
        self.refused.append(f"{ascii(what)[1:-1]}: {reason}; window skipped")

    def miss(self, what: str, reason: str) -> None:
        """A window whose archive (or sidecar) is gone: counted, named, not failing the run."""
        self.missing_windows += 1
        self.notes.append(missing_note(what, reason))

    def duplicate(self, copy: str, first: str) -> None:
        """A copy of a window already taken: counted, named with the one taken."""
        self.duplicate_windows += 1
        self.notes.append(duplicate_note(copy, first))

    def as_dict(self) -> dict[str, Any]:
        """Every counter, ``seconds`` rounded, plus ``mb_per_s`` (JSON-ready)."""
        d = {k: v for k, v in self.__dict__.items()}
        d["refused"] = list(self.refused)
        d["notes"] = list(self.notes)
        d["seconds"] = round(self.seconds, 3)
        d["mb_per_s"] = round(self.mb_per_s, 2)
        return d


@dataclass
class Pick:
    """One item chosen for the export: where it comes from and the member it becomes."""

    record: WindowRecord
    manifest: WindowManifest
    item: ManifestItem
    member: str
    label: str
    model_label: str | None
    split: str | None


def item_fields(item: ManifestItem, manifest: WindowManifest, human: str | None) -> dict[str, Any]:
    """The fields filters see for one item."""
    res = manifest.results.get(item.id)
    model_label = res.label if res else None
    return {
        "label": human if human is not None else model_label,
        "model_label": model_label,
        "relabelled": human is not None,
        "score": res.score if res else None,
        "anomaly": res.anomaly_score if res else None,
        "anomalous": bool(res and res.anomaly),
        "source": manifest.source,
        "device": manifest.device,
        "modality": item.modality or manifest.modality,
        "window": manifest.window_id,
        "name": item.name,
    }


def select_items(
    directory: Path,
    records: Sequence[WindowRecord],
    filters: Sequence[ItemFilter],
    relabels: Relabels | None,
    split: Sequence[float] | None,
    stats: ExportStats,
    progress: Progress | None = None,
) -> list[Pick]:
    """Pass 1 (sidecars only): which items go where; ``progress`` is told of each window.

    A window whose archive is gone is ``missing``; one whose archive is a link or special
    file is refused (as the fleet export's plan does). A copy of a window already taken (the
    same archive SHA-256 in its sidecar, under another name) is counted in
    ``duplicate_windows``, named, and gives nothing. An item kept in two windows (the same
    id: a window packed again after a crash) is taken from the first, in archive order, and
    counted once in ``duplicates``.
    """
    picks: list[Pick] = []
    seen: set[str] = set()
    taken: dict[str, str] = {}  # archive SHA-256 -> the sidecar of the window taken
    for rec in records:
        if progress is not None:
            progress(1)
        try:
            rw = read_sidecar(directory / rec.sidecar)
            regular_size(directory / rw.archive.file)
        except RetentionError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):  # evicted, never uploaded
                stats.miss(rec.window_id, str(exc))
            else:
                stats.refuse(rec.window_id, str(exc))
            continue
        first = taken.setdefault(rw.archive.sha256, rec.sidecar)
        if first != rec.sidecar:
            stats.duplicate(rec.sidecar, first)
            continue
        manifest = rw.manifest
        for p in select_window(rec, manifest, filters, relabels, split, stats):
            if p.item.id in seen:
                stats.duplicates += 1
                continue
            seen.add(p.item.id)
            picks.append(p)
    return picks


def select_window(
    rec: WindowRecord,
    manifest: WindowManifest,
    filters: Sequence[ItemFilter],
    relabels: Relabels | None,
    split: Sequence[float] | None,
    stats: ExportStats,
) -> list[Pick]:
    """The items of one window that go into the export, each counted in ``stats``."""
    picks: list[Pick] = []
    stats.windows += 1
    for item in manifest.items:
        stats.items_seen += 1
        human = relabels.lookup(item, manifest.window_id) if relabels else None
        fields = item_fields(item, manifest, human)
        if not all(f(fields) for f in filters):
            stats.filtered += 1
            continue
        if human == "":
            stats.dropped += 1
            continue
        label = fields["label"]
        if label is None or label == "":
            stats.unlabelled += 1
            continue
        part = split_of(item.id, split) if split else None
        name = member_name(str(label), item, part)
        if name is None:
            stats.unsafe += 1
            continue
        if human is not None:
            stats.relabelled += 1
        picks.append(Pick(rec, manifest, item, name, str(label), fields["model_label"], part))
    return picks


def provenance(p: Pick) -> dict[str, Any]:
    """The provenance entry of one exported member (``manifest.json`` ``items``)."""
    res = p.manifest.results.get(p.item.id)
    return {
        "member": p.member,
        "label": p.label,
        "split": p.split,
        "id": p.item.id,
        "name": p.item.name,
        "sha256": p.item.sha256,
        "size": p.item.size,
        "ts": p.item.ts,
        "window_id": p.manifest.window_id,
        "device": p.manifest.device,
        "site": p.manifest.site,
        "source": p.manifest.source,
        "modality": p.item.modality or p.manifest.modality,
        "window_closed_at": p.manifest.closed_at,
        "model": p.manifest.model,
        "model_version": p.manifest.model_version,
        "model_label": p.model_label,
        "score": res.score if res else None,
        "anomaly": bool(res and res.anomaly),
        "anomaly_score": res.anomaly_score if res else None,
        "relabelled": p.label != p.model_label,
    }


def export_trainset(
    directory: str | Path,
    out: str | Path,
    *,
    filters: Sequence[ItemFilter] = (),
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    relabels: Relabels | None = None,
    split: Sequence[float] | None = None,
    level: int = 3,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
    describe: Mapping[str, Any] | None = None,
    on_phase: Callable[[str, int], None] | None = None,
) -> ExportStats:
    """Build the training archive ``out`` (``.zip`` or ``.tar.zst``, written atomically).

    Pass 1 reads the sidecars and picks the items (:func:`select_items`); pass 2 reads
    their bytes, checked against the manifest's SHA-256; then the archive is written with
    ``manifest.json`` (provenance, and ``describe``: how the selection was made).
    ``on_phase(name, total)`` opens each pass (``selecting``: windows, ``reading``:
    bytes), ``progress`` then advances it; ``writing`` (the members' bytes) is advanced in
    one step when the archive is written; ``on_total`` is told the bytes of pass 2.
    """
    t0 = time.perf_counter()
    d, target = Path(directory), Path(out)
    fmt = output_format(target)
    try:
        listing = scan_retained(d, since, until, source)
    except RetentionError as exc:
        raise ExportError(str(exc)) from exc
    records = listing.records
    stats = ExportStats()
    for what, reason in listing.skipped:
        stats.refuse(what, reason)
    if on_phase is not None:
        on_phase("selecting", len(records))
    phased = progress if on_phase is not None else None  # windows are not bytes
    picks = select_items(d, records, filters, relabels, split, stats, phased)
    if relabels is not None:
        stats.relabels_unused = len(relabels) - len(relabels.used)
    total = within_bound(target, picks, max_bytes)
    if on_phase is not None:
        on_phase("reading", total)
    if on_total is not None:
        on_total(total)
    members, kept = read_members(d, records, picks, stats, progress)
    if not members:
        raise ExportError(nothing_to_export(d, target, stats, source))
    prov = [provenance(p) for p in kept]
    tally(stats, prov)
    manifest = export_manifest(prov, stats, split, describe)
    mtime = max(p.manifest.closed_at for p in kept)
    stats.notes.extend(sweep_stale_temps(target.parent))  # room a killed export held
    write = functools.partial(write_export, target, members, fmt, level, manifest, mtime)
    stats.bytes_out = _written(write, members, on_phase, progress)
    stats.seconds = time.perf_counter() - t0
    return stats


def within_bound(target: Path, picks: Sequence[Pick], max_bytes: int) -> int:
    """The bytes of the items picked; :class:`ExportError` when over ``max_bytes``."""
    total = sum(p.item.size for p in picks)
    if total > max_bytes:
        raise ExportError(
            f"{target}: the selection holds {total} bytes, over the export bound of {max_bytes};"
            " narrow it with --since/--until/--filter or raise --max-bytes"
        )
    return total


def _written(
    write: Callable[[], int],
    members: Sequence[tuple[str, bytes]],
    on_phase: Callable[[str, int], None] | None,
    progress: Progress | None,
) -> int:
    """Run ``write`` (the archive's writing) as the ``writing`` pass; the archive's size.

    Compressing and fsync are the longest pass on compressible members; the writer reports
    nothing per member, so the bar (in the members' bytes) fills in one step at the end.
    """
    held = sum(len(data) for _, data in members)
    if on_phase is not None:
        on_phase("writing", held)
    size = write()
    if on_phase is not None and progress is not None:
        progress(held)
    return size


def write_export(
    target: Path,
    members: Sequence[tuple[str, bytes]],
    fmt: str,
    level: int,
    manifest: Mapping[str, Any],
    mtime: float,
) -> int:
    """Write the training archive atomically; its size. :class:`ExportError` names it.

    It takes the mode the user's umask gives a new file (:func:`~cdml_edge.fsio.staged_path`).
    """
    from cdml_edge.archive import write_archive

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with staged_path(target) as staged:
            size = write_archive(
                staged, members, format=fmt, level=level, manifest=dict(manifest), mtime=mtime
            )
        return size
    except OSError as exc:  # a full disk, a folder where the archive goes: named
        raise ExportError(cannot_write(target, exc)) from exc


def output_format(target: Path) -> str:
    """The archive format ``target``'s name asks for; :class:`ExportError` if none."""
    from cdml_edge.archive import ArchiveError
    from cdml_edge.archive.pack import format_for_path

    try:
        return format_for_path(target)
    except ArchiveError as exc:
        raise ExportError(f"{target}: output must end in .zip or .tar.zst") from exc


def read_members(
    directory: Path,
    records: Sequence[WindowRecord],
    picks: Sequence[Pick],
    stats: ExportStats,
    progress: Progress | None = None,
) -> tuple[list[tuple[str, bytes]], list[Pick]]:
    """Pass 2: the picked items' bytes, sorted by member name, and the picks that gave them.

    Read in archive order; unreadable or mismatching items count as ``corrupt``.
    """
    members: list[tuple[str, bytes]] = []
    kept: list[Pick] = []
    by_window: dict[str, list[Pick]] = {}
    for p in picks:
        by_window.setdefault(p.record.sidecar, []).append(p)  # a copy may share the id
    for rec in records:
        group = by_window.get(rec.sidecar)
        if not group:
            continue
        try:  # a regular file within the window's recorded size: never a link or a FIFO
            archive = read_regular(directory / rec.file, rec.bytes)
        except RetentionError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):  # evicted since pass 1
                stats.miss(rec.window_id, str(exc))
                if progress is not None:
                    progress(sum(p.item.size for p in group))
                continue
            stats.refuse(rec.window_id, str(exc))
            stats.corrupt += len(group)
            if progress is not None:  # its bytes are done with too
                progress(sum(p.item.size for p in group))
            continue
        datas = read_group(archive, [p.item.member for p in group])
        unreadable = differ = 0
        for p, data in zip(group, datas, strict=True):
            if keep_member(p, data, stats):
                assert data is not None
                members.append((p.member, data))
                kept.append(p)
            elif data is None:
                unreadable += 1
            else:
                differ += 1
            if progress is not None:
                progress(p.item.size)
        note_corrupt(rec, len(group), unreadable, differ, stats)
    members.sort(key=lambda m: m[0])
    kept.sort(key=lambda p: p.member)
    return members, kept


def note_corrupt(
    rec: WindowRecord, picked: int, unreadable: int, differ: int, stats: ExportStats
) -> None:
    """Name the window in ``stats.notes`` when some of its ``picked`` items were corrupt."""
    if unreadable + differ == 0:
        return
    why = [
        f"{unreadable} cannot be read from {rec.file}" if unreadable else "",
        f"{differ} differ from the window manifest's SHA-256" if differ else "",
    ]
    stats.notes.append(
        f"{ascii(rec.window_id)[1:-1]}: {unreadable + differ} of {picked} items corrupt "
        f"({', '.join(w for w in why if w)}); skipped"
    )


def keep_member(p: Pick, data: bytes | None, stats: ExportStats) -> bool:
    """Whether ``data`` are the bytes the window manifest recorded for ``p``.

    When they are not, the item is counted ``corrupt``.
    """
    if data is None or hashlib.sha256(data).hexdigest() != p.item.sha256:
        stats.corrupt += 1
        return False
    stats.bytes_in += len(data)
    return True


def read_group(source: Any, members: Sequence[str]) -> Sequence[bytes | None]:
    """Members of one window archive, ``None`` for each that cannot be read.

    ``source``: a path, bytes or a ByteSource such as an ``s3://`` source. The members are
    read one by one when reading them together fails.
    """
    from cdml_edge.archive import ArchiveError, open_archive

    try:
        with open_archive(source) as arc:
            return arc.read_many(members)
    except (ArchiveError, OSError):
        try:  # one bad member: read one by one
            with open_archive(source) as arc:
                return [_read_or_none(arc, m) for m in members]
        except (ArchiveError, OSError):
            return [None] * len(members)


def tally(stats: ExportStats, prov: Sequence[Mapping[str, Any]]) -> None:
    """Classes, splits and the exported count of the members kept (their provenance)."""
    for p in prov:
        stats.classes[p["label"]] = stats.classes.get(p["label"], 0) + 1
        if p["split"] is not None:
            stats.splits[p["split"]] = stats.splits.get(p["split"], 0) + 1
    stats.exported = len(prov)
    stats.classes = dict(sorted(stats.classes.items()))
    stats.splits = {s: stats.splits[s] for s in SPLIT_NAMES if s in stats.splits}


def export_manifest(
    prov: Sequence[Mapping[str, Any]],
    stats: ExportStats,
    split: Sequence[float] | None,
    describe: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``manifest.json`` of a training archive holding the members ``prov`` describes."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "cdml-edge training export",
        "layout": "split/class/file" if split else "class/file",
        "selection": dict(describe or {}),
        "split": list(split) if split else None,
        "classes": stats.classes,
        "splits": stats.splits,
        "windows": sorted({p["window_id"] for p in prov}),
        "duplicates": stats.duplicates,
        "items": [dict(p) for p in prov],
    }


def _read_or_none(arc: Any, member: str) -> bytes | None:
    try:
        data: bytes = arc.read(member)
        return data
    except Exception:
        return None


def nothing_to_export(d: Path, target: Path, stats: ExportStats, source: str | None) -> str:
    """The error of an export that selected no item: where the items went, what the ring holds.

    A ``--source`` the ring holds no window of is named first (a typo used to read as an
    empty ring).
    """
    held = ring_contents(d)
    typo = unknown_source(source, held)
    where = f"; {typo}" if typo is not None else f"; {held.describe()}"
    return f"{target}: nothing to export ({why_empty(stats)}){where}"


def why_empty(s: ExportStats) -> str:
    """Where the items went, for the "nothing to export" error."""
    return (
        f"{s.windows} windows, {s.items_seen} items: {s.filtered} filtered out, "
        f"{s.unlabelled} unlabelled, {s.dropped} dropped, {s.unsafe} unsafe, {s.corrupt} corrupt"
        f", {s.duplicates} duplicates"
    )
