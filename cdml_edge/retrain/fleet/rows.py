"""What one read task makes of one retained window: the rows of a fleet dataset.

Three kinds of rows, one builder each (picklable; no Ray here, so they are tested alone):

* :class:`WindowRows` — one row per window with the archive bytes, for replay;
* :class:`ItemRows` — one row per item with its bytes and what the device published
  (label, score, anomaly, model), the general dataset of :func:`~.read_items`;
* :class:`PlanRows` — export pass 1: one row per item the export picks (member name and
  size, no bytes) and one ``window`` row with the selection's counters.

A window that cannot be read is one row with ``status`` (``refused``: its sidecar or archive
is a link or special file, never read; ``missing``: gone or unreadable; ``corrupt``: the
archive's SHA-256 differs from its sidecar's, or nothing in it can be read) and ``error``
naming the file; it never raises, so one bad window cannot abort a job. Windows outside
``since``/``until``/``source`` give no row at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cdml_edge.errors import CdmlError
from cdml_edge.retrain.export import ExportStats, Pick, read_group, select_window
from cdml_edge.retrain.filters import ItemFilter
from cdml_edge.retrain.fleet.fetch import (
    DEFAULT_WHOLE_LIMIT,
    FetchCount,
    archive_source,
    fetch_whole,
    refused,
)
from cdml_edge.retrain.fleet.locations import LIST_THREADS, S3Options, WindowRef, is_s3
from cdml_edge.retrain.relabels import Relabels
from cdml_edge.retrain.replay import archive_mismatch
from cdml_edge.store.catalog import WindowRecord
from cdml_edge.store.ondisk import RetentionError, regular_size
from cdml_edge.store.sidecar import RetainedWindow, parse_sidecar, window_record
from cdml_edge.window.manifest import WindowManifest

Row = dict[str, Any]
Columns = tuple[tuple[str, str], ...]  # (name, arrow type name)

_WINDOW_COLUMNS: Columns = (
    ("location", "string"),
    ("status", "string"),
    ("error", "string"),
    ("window_id", "string"),
    ("device", "string"),
    ("source", "string"),
    ("closed_at", "float64"),
    ("s3_requests", "int64"),
    ("s3_bytes", "int64"),
)


@dataclass(frozen=True)
class Scope:
    """What every read task of a job needs: where S3 is, which windows, which columns."""

    s3: S3Options = field(default_factory=S3Options)
    since: float | None = None
    until: float | None = None
    source: str | None = None
    partition_keys: tuple[str, ...] = ()
    whole_limit: int = DEFAULT_WHOLE_LIMIT

    def wants(self, m: WindowManifest) -> bool:
        """The window is in the selected time range and source (as ``list_retained``)."""
        return (
            (self.since is None or m.closed_at >= self.since)
            and (self.until is None or m.closed_at < self.until)
            and (self.source is None or m.source == self.source)
        )


def fetch_sidecar(ref: WindowRef, s3: S3Options, count: FetchCount) -> RetainedWindow:
    """The window's sidecar, read (one ``GET`` on S3) and checked."""
    data = fetch_whole(ref.sidecar, ref.sidecar_bytes, s3, count)
    return parse_sidecar(data, ref.sidecar)


@dataclass
class Copies:
    """The windows of a listing once each, and the copies left out.

    ``duplicates``: ``(copy, the window taken)`` sidecar locations; ``count``: what reading
    the sidecars of the suspects cost.
    """

    windows: list[WindowRef]
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    count: FetchCount = field(default_factory=FetchCount)


def drop_copies(refs: Sequence[WindowRef], scope: Scope) -> Copies:
    """``refs`` (location order) with each window once: a copy is left out, unread.

    A copy is a window whose sidecar records the same archive SHA-256 as one earlier in
    location order (the same window uploaded twice, copied into two folders or under another
    name), both archives listed; the local engine takes a window once by the same rule.
    Only suspects are read: windows whose listed archive has the size of another's (one
    ``GET`` of each sidecar on S3, 8 at a time). A sidecar that cannot be read here, or a
    window outside the selection, is left for the read task (which counts or skips it).
    """
    sizes: dict[int, int] = {}
    for r in refs:
        if r.archive is not None:
            sizes[r.archive_bytes] = sizes.get(r.archive_bytes, 0) + 1
    suspects = [r for r in refs if r.archive is not None and sizes[r.archive_bytes] > 1]
    out = Copies(list(refs))
    if not suspects:
        return out

    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="cdml-copies") as pool:
        digests = list(pool.map(lambda ref: _archive_digest(ref, scope), suspects))
    taken: dict[str, str] = {}
    left_out: set[str] = set()
    for ref, (sha, count) in zip(suspects, digests, strict=True):
        out.count.requests += count.requests
        out.count.bytes += count.bytes
        if sha is None:
            continue
        first = taken.setdefault(sha, ref.sidecar)
        if first != ref.sidecar:
            out.duplicates.append((ref.sidecar, first))
            left_out.add(ref.sidecar)
    out.windows = [r for r in refs if r.sidecar not in left_out]
    return out


def _archive_digest(ref: WindowRef, scope: Scope) -> tuple[str | None, FetchCount]:
    """The archive SHA-256 ``ref``'s sidecar records, and what reading it cost.

    None when the sidecar is unreadable, the window not selected, or the archive it names
    not the one listed beside it.
    """
    count = FetchCount()
    try:
        rw = fetch_sidecar(ref, scope.s3, count)
    except (CdmlError, OSError):
        return None, count
    named = ref.archive == ref.archive_at(rw.archive.file)
    return (rw.archive.sha256 if named and scope.wants(rw.manifest) else None), count


def partition_columns(keys: Iterable[str], taken: Iterable[str]) -> dict[str, str]:
    """Partition key -> column name: the key itself, or ``partition_<key>`` when taken.

    Taken: a column of the row already has that name (``device``: the manifest's value stays
    in ``device``).
    """
    used = set(taken)
    return {k: f"partition_{k}" if k in used else k for k in keys}


class _Builder:
    """Shared by the row builders: the columns, the sidecar, the window's base row."""

    columns_own: Columns = _WINDOW_COLUMNS

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        own = [c for c, _ in self.columns_own]
        self.part_cols = partition_columns(scope.partition_keys, own)

    @property
    def columns(self) -> Columns:
        return self.columns_own + tuple((c, "string") for c in self.part_cols.values())

    def base(self, ref: WindowRef, m: WindowManifest | None) -> Row:
        row: Row = {c: None for c, _ in self.columns}
        row.update(location=ref.sidecar, status="ok", s3_requests=0, s3_bytes=0)
        if m is not None:
            row.update(
                window_id=m.window_id, device=m.device, source=m.source, closed_at=m.closed_at
            )
        for k, v in ref.partitions:
            if k in self.part_cols:  # keys the job's listing did not see have no column
                row[self.part_cols[k]] = v
        return row

    def counted(self, row: Row, count: FetchCount) -> Row:
        row["s3_requests"], row["s3_bytes"] = count.requests, count.bytes
        return row

    def failed(self, ref: WindowRef, m: WindowManifest | None, status: str, msg: str) -> Row:
        row = self.base(ref, m)
        row.update(status=status, error=msg)
        return row

    def sidecar(self, ref: WindowRef, count: FetchCount) -> RetainedWindow:
        return fetch_sidecar(ref, self.scope.s3, count)

    def rows(self, ref: WindowRef) -> list[Row]:
        """The rows of one window; a window that cannot be read is one status row."""
        count = FetchCount()
        try:
            rw = self.sidecar(ref, count)
        except (CdmlError, OSError) as exc:
            status = "refused" if refused(exc) else "missing"
            return [self.counted(self.failed(ref, None, status, _msg(exc)), count)]
        if not self.scope.wants(rw.manifest):
            return []
        try:
            out = self.window_rows(ref, rw, count)
        except Exception as exc:  # whatever a hostile archive raises: a row, never a failed job
            out = [self.failed(ref, rw.manifest, _status(exc), _msg(exc))]
        if out:
            self.counted(out[-1], count)  # the window's requests on its last row
        return out

    def window_rows(self, ref: WindowRef, rw: RetainedWindow, count: FetchCount) -> list[Row]:
        raise NotImplementedError


def _msg(exc: BaseException) -> str:
    """``Type: message``; a refused file as the local engine names it (``path: reason``)."""
    return str(exc) if refused(exc) else f"{type(exc).__name__}: {exc}"


def _status(exc: BaseException) -> str:
    """``refused``, ``missing`` when the bytes could not be fetched, else ``corrupt``.

    Refused: a link or special file, never read (:func:`~.fetch.refused`). Not fetched:
    gone, S3 unreachable. ``corrupt``: they came but cannot be read.
    """
    from cdml_edge.archive.s3.errors import S3Error

    if refused(exc):
        return "refused"
    return "missing" if isinstance(exc, (OSError, S3Error, RetentionError)) else "corrupt"


def check_regular(location: str) -> None:
    """:class:`RetentionError` when a local ``location`` is a link or special file.

    Checked where a job would otherwise count a window it cannot read (``s3://`` objects
    are always plain).
    """
    if not is_s3(location):
        regular_size(location)


class WindowRows(_Builder):
    """One row per window: the sidecar and the whole archive, checked by SHA-256."""

    columns_own = (
        *_WINDOW_COLUMNS,
        ("archive_file", "string"),
        ("archive", "binary"),
        ("sidecar", "binary"),
    )

    def window_rows(self, ref: WindowRef, rw: RetainedWindow, count: FetchCount) -> list[Row]:
        """The window's row, or a ``corrupt`` row when the archive's SHA-256 differs."""
        m = rw.manifest
        where = ref.archive_at(rw.archive.file)
        size = ref.archive_bytes if ref.archive == where else rw.archive.bytes
        data = fetch_whole(where, size, self.scope.s3, count)
        bad = archive_mismatch(rw.archive, data, m.window_id)
        if bad is not None:
            return [self.failed(ref, m, "corrupt", f"{ref.folder}/{bad}")]
        row = self.base(ref, m)
        row.update(archive_file=rw.archive.file, archive=data, sidecar=rw.to_bytes())
        return [row]


# What a model said about one item (published by the device, or given by a replay).
VERDICT_COLUMNS: Columns = (
    ("label", "string"),
    ("score", "float64"),
    ("anomaly", "bool"),
    ("anomaly_score", "float64"),
    ("model", "string"),
    ("model_version", "string"),
)
_ITEM_COLUMNS: Columns = (
    ("item_id", "string"),
    ("name", "string"),
    ("member", "string"),
    ("modality", "string"),
    ("ts", "float64"),
    ("size", "int64"),
    ("sha256", "string"),
    ("data", "binary"),
    *VERDICT_COLUMNS,
)


class ItemRows(_Builder):
    """One row per item: its bytes and the results the device published for it.

    The bytes are checked against the manifest's SHA-256.
    """

    columns_own = (*_WINDOW_COLUMNS, *_ITEM_COLUMNS)

    def window_rows(self, ref: WindowRef, rw: RetainedWindow, count: FetchCount) -> list[Row]:
        """The window's item rows; an unreadable or mismatching item is ``corrupt``, no data."""
        import hashlib

        m = rw.manifest
        src, counted = self._source(ref, rw, count)
        if isinstance(src, dict):
            return [src]
        try:
            datas = read_group(src, [it.member for it in m.items])
        finally:
            if counted is not None:
                count.add(counted)
        out = []
        for it, data in zip(m.items, datas, strict=True):
            row = self.base(ref, m)
            res = m.results.get(it.id)
            ok = data is not None and hashlib.sha256(data).hexdigest() == it.sha256
            row.update(
                item_id=it.id,
                name=it.name,
                member=it.member,
                ts=it.ts,
                size=it.size,
                modality=it.modality or m.modality,
                sha256=it.sha256,
                data=data if ok else None,
                status="ok" if ok else "corrupt",
                error=None
                if ok
                else f"{ref.archive_at(rw.archive.file)}: member "
                f"{it.member!r} is unreadable or differs from its SHA-256",
                label=res.label if res else None,
                score=res.score if res else None,
                anomaly=bool(res and res.anomaly),
                anomaly_score=res.anomaly_score if res else None,
                model=m.model,
                model_version=m.model_version,
            )
            out.append(row)
        return out

    def _source(self, ref: WindowRef, rw: RetainedWindow, count: FetchCount) -> tuple[Any, Any]:
        """The archive to read members from (and the S3 source to count), or a ``corrupt`` row.

        ``corrupt`` when it is fetched whole from S3 and its SHA-256 differs from the
        sidecar's.
        """
        where = ref.archive_at(rw.archive.file)
        size = ref.archive_bytes if ref.archive == where else rw.archive.bytes
        src, counted = archive_source(where, size, self.scope.s3, self.scope.whole_limit, count)
        if isinstance(src, bytes) and is_s3(where):  # fetched whole: checked whole
            bad = archive_mismatch(rw.archive, src, rw.manifest.window_id)
            if bad is not None:
                return self.failed(ref, rw.manifest, "corrupt", f"{ref.folder}/{bad}"), None
        return src, counted


def _record(ref: WindowRef, rw: RetainedWindow) -> WindowRecord:
    name = ref.sidecar.rsplit("/", 1)[-1]
    return window_record(rw.manifest, rw.archive, name, rw.archive.bytes + ref.sidecar_bytes)


@dataclass(frozen=True)
class ItemSelection:
    """An export's selection, sent to every read task: filters, relabels, split."""

    filters: Sequence[ItemFilter] = ()
    relabels: Relabels | None = None
    split: Sequence[float] | None = None

    def picks(self, ref: WindowRef, rw: RetainedWindow, stats: ExportStats) -> list[Pick]:
        """The window's items the export takes (the local export's own choice)."""
        return select_window(
            _record(ref, rw), rw.manifest, self.filters, self.relabels, self.split, stats
        )


class PlanRows(_Builder):
    """Export pass 1: a ``pick`` row per chosen item, then one ``window`` row.

    A ``pick`` row has the member name and size; the ``window`` row's ``stats`` are the
    selection's counters as JSON.
    """

    columns_own = (
        *_WINDOW_COLUMNS,
        ("member", "string"),
        ("size", "int64"),
        ("stats", "string"),
    )

    def __init__(self, scope: Scope, selection: ItemSelection) -> None:
        super().__init__(scope)
        self.selection = selection

    def window_rows(self, ref: WindowRef, rw: RetainedWindow, count: FetchCount) -> list[Row]:
        """The window's ``pick`` rows, then its ``window`` row (counters, relabels used)."""
        check_regular(ref.archive_at(rw.archive.file))  # refused here, as the local export
        stats = ExportStats()
        relabels = self.selection.relabels
        before = set(relabels.used) if relabels is not None else set()
        out = []
        for p in self.selection.picks(ref, rw, stats):
            row = self.base(ref, rw.manifest)
            row.update(status="pick", member=p.member, size=p.item.size)
            out.append(row)
        used = sorted(relabels.used - before) if relabels is not None else []
        tail = self.base(ref, rw.manifest)
        tail.update(status="window", stats=json.dumps(_counters(stats, used)))
        return [*out, tail]


def _counters(stats: ExportStats, used: list[tuple[str, ...]]) -> dict[str, Any]:
    keys = ("windows", "items_seen", "filtered", "unlabelled", "dropped", "unsafe", "relabelled")
    d: dict[str, Any] = {k: getattr(stats, k) for k in keys}
    d["relabels_used"] = [list(u) for u in used]
    return d


def merge_counters(stats: ExportStats, counters: Mapping[str, Any]) -> set[tuple[str, ...]]:
    """Add one ``window`` row's counters to ``stats``; the relabel keys it used."""
    for k, v in counters.items():
        if k != "relabels_used":
            setattr(stats, k, getattr(stats, k) + int(v))
    return {tuple(u) for u in counters.get("relabels_used", ())}


__all__ = [
    "ItemRows",
    "PlanRows",
    "Row",
    "Scope",
    "ItemSelection",
    "WindowRows",
    "Copies",
    "check_regular",
    "drop_copies",
    "fetch_sidecar",
    "merge_counters",
    "partition_columns",
]
