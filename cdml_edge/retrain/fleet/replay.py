"""Fleet replay: every retained window under a root re-scored on Ray, results as Parquet.

Steps: list the windows (:func:`~.locations.list_windows`), cut them into batches of
consecutive windows and hand the batches to a pool of :class:`~.scorer.ReplayScorer`
actors (plain Ray actors, one per ``actor_cpus`` of the cluster). Each actor reads its
windows itself (the archive checked against its sidecar's SHA-256), scores them and writes
its results as one Parquet file per batch into a temporary folder beside ``out``; only the
small ``window`` rows come back, added up into the local replay's
:class:`~cdml_edge.retrain.replay.ReplayStats`, plus a breakdown per device and model. The
``record`` column holds the line the local replay writes for the same result, byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdml_edge.decode.limits import DecodeLimits
from cdml_edge.fsio import umask_mode
from cdml_edge.retrain.errors import OptionError
from cdml_edge.retrain.fleet.locations import (
    S3Options,
    WindowRef,
    group_windows,
    list_windows,
    weight,
)
from cdml_edge.retrain.fleet.rows import Copies, Row, Scope, WindowRows, drop_copies
from cdml_edge.retrain.fleet.scorer import (
    ModelShipment,
    ReplayScorer,
    result_columns,
    write_part,
)
from cdml_edge.retrain.fleet.session import FleetTuning, cluster_cpus
from cdml_edge.retrain.replay import ReplayStats
from cdml_edge.retrain.replay_job import ReplaySummary

DEFAULT_FLEET_REPLAY_OUT = "replay-results.parquet"


@dataclass
class FleetReplaySummary:
    """A fleet replay: the local replay's counters, per device and model, S3 costs."""

    stats: ReplayStats
    out: str
    by_device: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    archives: int = 0
    list_requests: int = 0
    s3_requests: int = 0
    s3_bytes: int = 0

    @property
    def complete(self) -> bool:
        """Every window was read (the exit status is 0), as for the local replay."""
        return self.stats.corrupt == 0 and self.stats.skipped == 0

    def line(self) -> str:
        """The local replay's summary line, then the fleet's details as one JSON line."""
        extra = {
            "by_device": self.by_device,
            "corrupt": self.stats.corrupt,
            "errors": self.stats.errors,
            "list_requests": self.list_requests,
            "s3_requests": self.s3_requests,
            "s3_requests_per_archive": round(self.s3_requests / self.archives, 2)
            if self.archives
            else 0.0,
            "s3_bytes": self.s3_bytes,
        }
        head = ReplaySummary(self.stats, Path(self.out)).line()
        return head + "\n" + json.dumps(extra, sort_keys=True)


def fleet_replay(
    root: str,
    models: Sequence[ModelShipment],
    model_names: Mapping[str, str],
    out: str | os.PathLike[str],
    *,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    segment_rows: Mapping[str, int | None] | None = None,
    s3: S3Options | None = None,
    tuning: FleetTuning | None = None,
    source_models: Mapping[str, Sequence[str]] | None = None,
    limits: DecodeLimits | None = None,
) -> FleetReplaySummary:
    """Re-score the windows under ``root`` on the running Ray (see the module docstring).

    ``out`` becomes a folder of Parquet files, replaced whole at the end; the workers write
    into it, so on a cluster it is a shared folder. ``limits``: the decode limits the actors
    decode with (default: the decoders' own).
    """
    t0 = time.perf_counter()
    tune = tuning or FleetTuning()
    target = Path(out)
    _check_out(target)
    listing = list_windows(root, since, until, s3)
    scope = Scope(s3 or S3Options(), since, until, source, listing.partition_keys)
    copies = drop_copies(listing.windows, scope)  # each window once, as the local replay
    builder = WindowRows(scope)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        kwargs = {
            "models": list(models),
            "segment_rows": dict(segment_rows or {}),
            "builder": builder,
            "folder": str(tmp.resolve()),
            "source_models": {k: list(v) for k, v in (source_models or {}).items()},
            "limits": limits,
        }
        windows = _score(copies.windows, kwargs, tune)
        summary = _summarise(windows, str(target), listing.list_requests)
        summary.stats.models = dict(model_names)
        _count_copies(summary, copies)
        if not any(tmp.glob("part-*.parquet")):  # nothing scored: an empty table all the same
            write_part(
                tmp / "part-00000.parquet", [], result_columns(list(builder.part_cols.values()))
            )
        _put_in_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary.stats.seconds = time.perf_counter() - t0
    return summary


def _score(refs: Sequence[WindowRef], kwargs: dict[str, Any], tune: FleetTuning) -> list[Row]:
    """The ``window`` rows of every window, scored on a pool of actors, batch by batch.

    One actor per ``actor_cpus`` of the cluster (at most one per window), each loading the
    models once; the windows cut into ``batches_per_actor`` batches per actor or more (so
    that a slow batch does not hold the others up), of at most ``windows_per_batch``.
    An actor whose worker process dies (killed for memory, a crash) is started again and its
    batch run again, up to ``retries`` times (a batch's Parquet part is written whole or not
    at all, so a rerun leaves no trace of the first try); Ray's tasks do the same by default.
    """
    import ray
    from ray.util import ActorPool

    if not refs:
        return []
    wanted = tune.actors or max(1, int(cluster_cpus() / tune.actor_cpus))
    n = max(1, min(wanted, len(refs)))
    cuts = max(tune.batches_per_actor * n, -(-len(refs) // tune.windows_per_batch))
    batches = group_windows(refs, cuts, weight)
    actor: Any = ray.remote(
        num_cpus=tune.actor_cpus, max_restarts=tune.retries, max_task_retries=tune.retries
    )(ReplayScorer)
    shared = {k: ray.put(kwargs[k]) for k in ("models", "builder")}  # once, not per actor
    actors: list[Any] = [actor.remote(**{**kwargs, **shared}) for _ in range(n)]
    try:
        ray.get([a.ready.remote() for a in actors])
        pool = ActorPool(actors)
        jobs = list(enumerate(batches))
        out: list[Row] = []
        for rows in pool.map_unordered(lambda a, job: a.run.remote(*job), jobs):
            out += rows
        return out
    finally:
        for a in actors:
            ray.kill(a)


def _count_copies(summary: FleetReplaySummary, copies: Copies) -> None:
    """The copies left out: counted, named (as the local replay names them), their cost."""
    for copy, first in copies.duplicates:
        summary.stats.duplicate(copy, first)
    summary.stats.notes.sort()
    summary.s3_requests += copies.count.requests
    summary.s3_bytes += copies.count.bytes


def _summarise(windows: Sequence[Row], out: str, list_requests: int) -> FleetReplaySummary:
    summary = FleetReplaySummary(ReplayStats(), out, list_requests=list_requests)
    st = summary.stats
    for row in windows:
        c = json.loads(row["stats"])
        for k in (
            "windows",
            "items",
            "failures",
            "missing",
            "corrupt",
            "skipped",
            "changed_labels",
            "changed_anomalies",
            "first_verdicts",
            "bytes_read",
        ):
            setattr(st, k, getattr(st, k) + c[k])
        for modality, n in c["by_modality"].items():
            st.by_modality[modality] = st.by_modality.get(modality, 0) + n
        st.errors += c["errors"]
        st.notes += c["notes"]
        summary.archives += 1
        summary.s3_requests += c["s3_requests"]
        summary.s3_bytes += c["s3_bytes"]
        if not row["device"] and not c["by_model"]:
            continue  # a sidecar never read (refused, gone): no device to count it under
        per_model = summary.by_device.setdefault(row["device"] or "?", {})
        for model, counts in c["by_model"].items():
            acc = per_model.setdefault(model, dict.fromkeys(counts, 0))
            for k, v in counts.items():
                acc[k] += v
    st.errors.sort()
    return summary


def _check_out(target: Path) -> None:
    """``out`` may be replaced only when it is a folder of Parquet files (an earlier run)."""
    if str(target).startswith("s3:"):
        raise OptionError(f"{target}: --out is a local or shared folder, not s3://")
    if not target.exists():
        return
    if not target.is_dir() or any(
        not (n.endswith(".parquet") or n.startswith(".")) for n in os.listdir(target)
    ):
        raise OptionError(f"{target}: exists and is not a folder of Parquet results")


def _put_in_place(tmp: Path, target: Path) -> None:
    """The finished folder ``tmp`` becomes ``target`` (an earlier run's folder replaced).

    Its Parquet files first take the mode the user's umask gives a new file, whatever the
    umask of the workers that wrote them (a Ray started elsewhere, or before a ``umask``);
    the folder has it already (made here).
    """
    mode = umask_mode(tmp)
    for part in tmp.iterdir():
        os.chmod(part, mode, follow_symlinks=False)
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


__all__ = ["DEFAULT_FLEET_REPLAY_OUT", "FleetReplaySummary", "fleet_replay"]
