"""Fleet export: the local training export over every window under a root, on Ray.

The same two passes as :func:`~cdml_edge.retrain.export.export_trainset`, spread out:

1. **plan** — Ray tasks, each over a run of windows, read the sidecars only and run the
   local export's selection (:func:`~cdml_edge.retrain.export.select_window`: filters,
   relabels, hashed split, member names); the driver gets one small row per picked item
   (member name, size, window);
2. **shards** — the picks sorted by member name are cut into shards of at most
   ``max_bytes`` member bytes; one Ray task per shard reads its members (small archives
   whole, large ones by ranges), checks each against the manifest's SHA-256 and writes the
   archive with its ``manifest.json`` (:func:`~cdml_edge.retrain.export.export_manifest`).

When everything fits in one shard, the archive is ``out`` itself and is byte for byte what
the local export writes from the same windows. More shards are written beside it as
``<stem>-00000-of-00003.zip`` …, each a training archive of its own with the provenance of
its members, plus ``<stem>.shards.json`` listing them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import UMASK, atomic_write, staged_path, umask_mode
from cdml_edge.retrain.errors import ExportError
from cdml_edge.retrain.export import (
    ExportStats,
    export_manifest,
    keep_member,
    output_format,
    provenance,
    read_group,
    tally,
    why_empty,
)
from cdml_edge.retrain.export_job import ExportSummary, Selection
from cdml_edge.retrain.fleet.fetch import (
    DEFAULT_WHOLE_LIMIT,
    FetchCount,
    archive_source,
    refused,
)
from cdml_edge.retrain.fleet.locations import (
    Listing,
    S3Options,
    WindowRef,
    group_windows,
    list_windows,
    weight,
)
from cdml_edge.retrain.fleet.rows import (
    ItemSelection,
    PlanRows,
    Scope,
    drop_copies,
    fetch_sidecar,
    merge_counters,
)
from cdml_edge.retrain.fleet.session import FleetTuning, cluster_cpus
from cdml_edge.retrain.layout import SPLIT_NAMES
from cdml_edge.store.ondisk import RetentionError


@dataclass
class FleetExportSummary:
    """A fleet export: the local export's counters, the shards written, S3 costs."""

    stats: ExportStats
    out: str
    shards: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0  # picks whose member name an earlier window already gave
    list_requests: int = 0
    s3_requests: int = 0
    s3_bytes: int = 0

    def text(self) -> str:
        """The local export's summary, then the fleet's details as one JSON line."""
        extra = {
            "shards": [{k: s[k] for k in ("file", "bytes", "members")} for s in self.shards],
            "errors": self.errors,
            "duplicates": self.duplicates,
            "list_requests": self.list_requests,
            "s3_requests": self.s3_requests,
            "s3_bytes": self.s3_bytes,
        }
        where = Path(self.out)
        if len(self.shards) > 1:  # the shards and their index stand beside OUT
            where = Path(self.shards[0]["file"]).with_name(index_name(where))
        return ExportSummary(self.stats, where).text() + "\n" + json.dumps(extra)


@dataclass(frozen=True)
class ShardJob:
    """What every shard writer needs besides its own members (picklable)."""

    scope: Scope
    chooser: ItemSelection
    fmt: str
    level: int
    describe: Mapping[str, Any]
    count: int
    mode: int | None = None  # of the archives: the driver's umask's (the user's), not a worker's


@dataclass
class _ExportPlan:
    stats: ExportStats
    picks: list[tuple[str, int, str]]  # member, size, sidecar location
    errors: list[str]
    used: set[tuple[str, ...]]
    s3_requests: int = 0
    s3_bytes: int = 0
    duplicates: int = 0


def fleet_export(
    root: str,
    out: str | Path,
    selection: Selection,
    *,
    source: str | None = None,
    level: int = 3,
    describe: Mapping[str, Any] | None = None,
    s3: S3Options | None = None,
    whole_limit: int = DEFAULT_WHOLE_LIMIT,
    tuning: FleetTuning | None = None,
) -> FleetExportSummary:
    """Export the windows under ``root`` into ``out`` (see the module docstring).

    Archives up to ``whole_limit`` bytes are fetched whole, larger ones by ranges.
    """
    t0 = time.perf_counter()
    if str(out).startswith("s3:"):
        raise ExportError(f"{out}: OUT is a local or shared folder, not s3://")
    target = Path(out)
    fmt = output_format(target)
    tune = tuning or FleetTuning()
    listing = list_windows(root, selection.since, selection.until, s3)
    scope = Scope(
        s3 or S3Options(),
        selection.since,
        selection.until,
        source,
        listing.partition_keys,
        whole_limit,
    )
    chooser = ItemSelection(selection.filters, selection.relabels, selection.split)
    plan = _plan(listing.windows, scope, chooser, tune)
    st = plan.stats
    if selection.relabels is not None:
        st.relabels_unused = len(selection.relabels) - len(plan.used)
    if not plan.picks:
        raise ExportError(f"{target}: nothing to export ({why_empty(st)})")
    shards = cut_shards(plan.picks, selection.max_bytes)
    specs = _specs(shards, listing, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = umask_mode(target.parent)
    job = ShardJob(scope, chooser, fmt, level, dict(describe or {}), len(specs), mode)
    results = _write_shards(specs, job, tune)
    summary = FleetExportSummary(
        st,
        str(target),
        errors=plan.errors,
        duplicates=plan.duplicates,
        list_requests=listing.list_requests,
    )
    summary.s3_requests, summary.s3_bytes = plan.s3_requests, plan.s3_bytes
    _merge(summary, results)
    if st.exported == 0:
        raise ExportError(f"{target}: nothing to export ({why_empty(st)})")
    if len(specs) > 1:
        _write_index(target, summary)
    st.seconds = time.perf_counter() - t0
    return summary


def _plan(
    windows: Sequence[WindowRef], scope: Scope, chooser: ItemSelection, tune: FleetTuning
) -> _ExportPlan:
    """Pass 1 on Ray: the picks, sorted by member name, and the selection's counters.

    Each window once, as the local export takes them: a copy (:func:`~.rows.drop_copies`)
    is counted in ``duplicate_windows`` and named, never read.
    """
    import ray

    copies = drop_copies(windows, scope)
    builder = PlanRows(scope, chooser)
    wanted = -(-len(copies.windows) // tune.plan_windows)
    cuts = min(wanted, int(cluster_cpus() / tune.plan_cpus))
    groups = group_windows(copies.windows, cuts, weight)
    task = ray.remote(num_cpus=tune.plan_cpus)(plan_rows)
    shared = ray.put(builder)
    plan = _ExportPlan(ExportStats(), [], [], set(), copies.count.requests, copies.count.bytes)
    for copy, first in copies.duplicates:
        plan.stats.duplicate(copy, first)
    for rows in ray.get([task.remote(shared, g) for g in groups]):
        for row in rows:
            _add_plan_row(plan, row)
    _drop_duplicates(plan)
    plan.errors.sort()
    plan.stats.notes.sort()
    return plan


_PLAN_COLUMNS = ("location", "window_id", "status", "error", "member", "size", "stats")


def plan_rows(builder: PlanRows, refs: Sequence[WindowRef]) -> list[dict[str, Any]]:
    """Pass 1 for a group of windows (a Ray task): the rows the driver needs, no more."""
    keep = (*_PLAN_COLUMNS, "s3_requests", "s3_bytes")
    return [{k: row[k] for k in keep} for ref in refs for row in builder.rows(ref)]


def _add_plan_row(plan: _ExportPlan, row: Mapping[str, Any]) -> None:
    plan.s3_requests += row["s3_requests"] or 0
    plan.s3_bytes += row["s3_bytes"] or 0
    if row["status"] == "pick":
        plan.picks.append((row["member"], row["size"], row["location"]))
    elif row["status"] == "window":
        plan.used |= merge_counters(plan.stats, json.loads(row["stats"]))
    elif row["status"] == "refused":  # named and failing the run, as the local export
        plan.stats.refuse(row["window_id"] or row["location"], row["error"])
    else:  # missing: counted and named, not failing the run, as by the local export
        plan.stats.miss(row["window_id"] or row["location"], row["error"] or row["location"])


def _drop_duplicates(plan: _ExportPlan) -> None:
    """One pick per member name: an item retained twice is exported once.

    Retained twice: a window packed again after a crash, the same window uploaded twice. The
    item comes from the first location.
    """
    plan.picks.sort()
    kept: list[tuple[str, int, str]] = []
    for p in plan.picks:
        if kept and kept[-1][0] == p[0]:
            plan.duplicates += 1
            plan.errors.append(f"{p[2]}: member {p[0]!r} already comes from {kept[-1][2]}")
            continue
        kept.append(p)
    plan.picks = kept
    plan.stats.duplicates = plan.duplicates  # the manifest says so, as a local export does


def cut_shards(picks: Sequence[tuple[str, int, str]], bound: int) -> list[list[Any]]:
    """Consecutive picks (sorted by member name) in shards of at most ``bound`` member bytes.

    A member larger than ``bound`` is a shard of its own.
    """
    shards: list[list[Any]] = [[]]
    held = 0
    for p in picks:
        if shards[-1] and held + p[1] > bound:
            shards.append([])
            held = 0
        shards[-1].append(p)
        held += p[1]
    return shards


def shard_path(target: Path, index: int, count: int) -> Path:
    """``out`` itself for a single shard, else ``<stem>-<index>-of-<count><ext>`` beside it."""
    if count == 1:
        return target
    ext = ".tar.zst" if target.name.endswith(".tar.zst") else target.suffix
    stem = target.name[: -len(ext)]
    return target.with_name(f"{stem}-{index:05d}-of-{count:05d}{ext}")


def _specs(shards: list[list[Any]], listing: Listing, target: Path) -> list[dict[str, Any]]:
    by_location = {r.sidecar: r for r in listing.windows}
    specs = []
    for i, shard in enumerate(shards):
        locations = sorted({p[2] for p in shard})
        specs.append(
            {
                "index": i,
                "path": str(shard_path(target, i, len(shards))),
                "members": [[p[0], p[2]] for p in shard],
                "windows": [dataclasses.asdict(by_location[loc]) for loc in locations],
            }
        )
    return specs


def _write_shards(
    specs: list[dict[str, Any]], job: ShardJob, tune: FleetTuning
) -> list[dict[str, Any]]:
    """Pass 2 on Ray: one task per shard."""
    import ray

    task = ray.remote(num_cpus=tune.writer_cpus)(write_shard)
    shared = ray.put(job)
    done = ray.get([task.remote({"spec": json.dumps(s)}, shared) for s in specs])
    return sorted(done, key=lambda r: r["index"])


def write_shard(row: Mapping[str, Any], job: ShardJob) -> dict[str, Any]:
    """Pass 2 for one shard (a Ray task): read, check and write its members."""
    spec = json.loads(row["spec"])
    wanted = {(m, loc) for m, loc in spec["members"]}
    stats, count = ExportStats(), FetchCount()
    members: list[tuple[str, bytes]] = []
    prov: list[dict[str, Any]] = []
    errors: list[str] = []
    for d in spec["windows"]:
        ref = WindowRef(**{**d, "partitions": tuple(tuple(p) for p in d["partitions"])})
        try:
            got = _shard_members(ref, job, wanted, stats, count)
        except (CdmlError, OSError) as exc:  # gone since the plan: counted, not raised
            stats.missing_windows += 1
            errors.append(f"{ref.sidecar}: {type(exc).__name__}: {exc}")
            continue
        for member, data, p in got:
            members.append((member, data))
            prov.append(p)
    members.sort(key=lambda m: m[0])
    prov.sort(key=lambda p: p["member"])
    tally(stats, prov)
    out = {
        "index": spec["index"],
        "file": spec["path"],
        "bytes": 0,
        "sha256": None,
        "members": len(members),
        "errors": errors,
        "stats": json.dumps(stats.as_dict()),
        "s3_requests": count.requests,
        "s3_bytes": count.bytes,
    }
    if members:
        out["bytes"], out["sha256"] = _write(spec, job, members, prov, stats)
    return out


def _shard_members(
    ref: WindowRef,
    job: ShardJob,
    wanted: set[tuple[str, str]],
    stats: ExportStats,
    count: FetchCount,
) -> list[tuple[str, bytes, dict[str, Any]]]:
    """The wanted members of one window, checked; mismatches are counted ``corrupt``."""
    rw = fetch_sidecar(ref, job.scope.s3, count)
    if not job.scope.wants(rw.manifest):
        return []
    picks = [
        p for p in job.chooser.picks(ref, rw, ExportStats()) if (p.member, ref.sidecar) in wanted
    ]
    if not picks:
        return []
    where = ref.archive_at(rw.archive.file)
    size = ref.archive_bytes if ref.archive == where else rw.archive.bytes
    try:
        src, counted = archive_source(where, size, job.scope.s3, job.scope.whole_limit, count)
    except RetentionError as exc:
        if not refused(exc):
            raise
        stats.refuse(rw.manifest.window_id, str(exc))  # swapped for a link since the plan
        stats.corrupt += len(picks)
        return []
    try:
        datas = read_group(src, [p.item.member for p in picks])
    finally:
        if counted is not None:
            count.add(counted)
    return [
        (p.member, data, provenance(p))
        for p, data in zip(picks, datas, strict=True)
        if keep_member(p, data, stats) and data is not None
    ]


def _write(
    spec: Mapping[str, Any],
    job: ShardJob,
    members: list[tuple[str, bytes]],
    prov: list[dict[str, Any]],
    stats: ExportStats,
) -> tuple[int, str]:
    from cdml_edge.archive import write_archive

    manifest = export_manifest(prov, stats, job.chooser.split, job.describe)
    if job.count > 1:
        manifest["shard"] = {"index": spec["index"], "count": job.count}
    path = Path(spec["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    mtime = max(p["window_closed_at"] for p in prov)
    with staged_path(path, mode=job.mode) as staged:  # a user's output: the umask's mode
        size = write_archive(
            staged, members, format=job.fmt, level=job.level, manifest=manifest, mtime=mtime
        )
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return size, digest.hexdigest()


def _merge(summary: FleetExportSummary, results: list[dict[str, Any]]) -> None:
    st = summary.stats
    for r in results:
        s = json.loads(r["stats"])
        for k in ("corrupt", "bytes_in", "exported", "missing_windows"):
            setattr(st, k, getattr(st, k) + s[k])
        st.refused += s["refused"]
        for name, n in s["classes"].items():
            st.classes[name] = st.classes.get(name, 0) + n
        for name, n in s["splits"].items():
            st.splits[name] = st.splits.get(name, 0) + n
        st.bytes_out += r["bytes"]
        summary.errors += r["errors"]
        summary.s3_requests += r["s3_requests"]
        summary.s3_bytes += r["s3_bytes"]
        if r["members"]:
            summary.shards.append(
                {k: r[k] for k in ("index", "file", "bytes", "sha256", "members")}
            )
    st.classes = dict(sorted(st.classes.items()))
    st.splits = {s: st.splits[s] for s in SPLIT_NAMES if s in st.splits}


def index_name(target: Path) -> str:
    """``<stem>.shards.json`` for ``OUT`` = ``<stem>.zip`` or ``<stem>.tar.zst``."""
    ext = ".tar.zst" if target.name.endswith(".tar.zst") else target.suffix
    return target.name[: -len(ext)] + ".shards.json"


def _write_index(target: Path, summary: FleetExportSummary) -> None:
    """``<stem>.shards.json``: the shards, their sizes and SHA-256, the export's counters."""
    index = {
        "kind": "cdml-edge training export shards",
        "shards": [{**s, "file": Path(s["file"]).name} for s in summary.shards],
        "stats": summary.stats.as_dict() | {"seconds": None, "mb_per_s": None},
    }
    data = json.dumps(index, indent=1, sort_keys=True).encode() + b"\n"
    atomic_write(target.with_name(index_name(target)), data, mode=UMASK)


__all__ = [
    "FleetExportSummary",
    "ShardJob",
    "cut_shards",
    "fleet_export",
    "plan_rows",
    "shard_path",
    "write_shard",
]
