"""The replay step of a fleet job: a Ray actor that reads, re-scores and writes windows.

:class:`ReplayScorer` holds one onnxruntime session per model (the ``.onnx`` bytes travel with
the job, so workers need no shared filesystem for them). Each call (:meth:`ReplayScorer.run`)
takes a batch of windows: the actor reads each one itself (:class:`~.rows.WindowRows`: the
archive checked against its sidecar's SHA-256), scores it with
:func:`~cdml_edge.retrain.replay.rescore_window`, the local replay's own step (one batch per
window and modality, the clock pinned to the window's close time), writes the batch's result
records as one Parquet file (the local replay's JSON line in ``record``, its fields as
columns) and returns one small ``window`` row per window with its counters. A window that
cannot be read or scored is counted, never raised. Windows cross the object store never:
only their locations go in and counters come back.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdml_edge.decode.limits import DecodeLimits, set_limits
from cdml_edge.model.runner import ModelOverrides, ModelRunner, load_runners
from cdml_edge.retrain.fleet.locations import WindowRef
from cdml_edge.retrain.fleet.rows import VERDICT_COLUMNS, Columns, Row, WindowRows
from cdml_edge.retrain.replay import (
    ReplayStats,
    changes,
    count_window,
    dumps_record,
    rescore_window,
)
from cdml_edge.store.sidecar import parse_sidecar
from cdml_edge.window.examples import fit_examples
from cdml_edge.window.topics import Sequencer

RESULT_COLUMNS: Columns = (
    ("kind", "string"),  # result | failure | window
    ("window_id", "string"),
    ("device", "string"),
    ("source", "string"),
    ("closed_at", "float64"),
    ("position", "int64"),  # the record's place in its window
    ("record", "string"),  # the local replay's JSON line
    ("id", "string"),
    ("item", "string"),
    ("modality", "string"),
    ("ts", "float64"),
    *VERDICT_COLUMNS,
    ("error", "string"),
    ("message", "string"),
    *((f"was_{name}", kind) for name, kind in VERDICT_COLUMNS),
    ("stats", "string"),  # window rows: the window's counters as JSON
)
_WAS = tuple(name for name, _ in VERDICT_COLUMNS)


@dataclass(frozen=True)
class ModelShipment:
    """One model for the actors: its ``.onnx`` bytes and the configuration's overrides."""

    modality: str
    file_name: str
    data: bytes
    overrides: ModelOverrides


def ship_models(
    runners: Mapping[str, ModelRunner],
    configured: Mapping[str, tuple[str | Path, ModelOverrides]],
    extra: Sequence[str | Path],
) -> list[ModelShipment]:
    """The models the driver loaded, as bytes, each with the overrides the local replay uses.

    A ``--model`` file comes without overrides (as the local replay loads it), a configured
    one with the configuration's.
    """
    extra_paths = {Path(p) for p in extra}
    out = []
    for modality, r in sorted(runners.items()):
        assert r.path is not None
        ov = ModelOverrides()
        if r.path not in extra_paths and modality in configured:
            ov = configured[modality][1]
        out.append(ModelShipment(modality, r.path.name, r.path.read_bytes(), ov))
    return out


def result_columns(partition_columns: Sequence[str]) -> Columns:
    """The columns of the Parquet results: :data:`RESULT_COLUMNS` but ``stats``, partitions."""
    own = tuple(c for c in RESULT_COLUMNS if c[0] != "stats")
    return own + tuple((c, "string") for c in partition_columns)


def write_part(path: Path, rows: Sequence[Row], columns: Columns) -> None:
    """``rows`` as one Parquet file (written under a temporary name, then renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cdml_edge.retrain.fleet.arrow import arrow_schema

    table = pa.Table.from_pylist(list(rows), schema=arrow_schema(columns))
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.rename(path)


class ReplayScorer:
    """Ray actor: batches of windows in (:meth:`run`), Parquet parts and ``window`` rows out."""

    def __init__(
        self,
        models: Sequence[ModelShipment],
        segment_rows: Mapping[str, int | None],
        builder: WindowRows,
        folder: str,
        source_models: Mapping[str, Sequence[str]] | None = None,
        limits: DecodeLimits | None = None,
    ) -> None:
        if limits is not None:  # this worker process decodes as the configuration says
            set_limits(limits)
        unpacked = tempfile.mkdtemp(prefix="cdml-models-")
        try:
            spec: dict[str, tuple[str | Path, ModelOverrides]] = {}
            for m in models:
                path = Path(unpacked) / m.modality / m.file_name
                path.parent.mkdir()
                path.write_bytes(m.data)
                spec[m.modality] = (path, m.overrides)
            self.runners = load_runners(spec, warm_up=True)
            fit_examples(self.runners)  # embedding examples: folders the workers can read
        finally:  # onnxruntime holds the model in memory once the session exists
            shutil.rmtree(unpacked, ignore_errors=True)
        self.segment_rows = dict(segment_rows)
        self.source_models = {k: list(v) for k, v in (source_models or {}).items()}
        self.builder = builder
        self.folder = Path(folder)
        self.partition_columns = tuple(builder.part_cols.values())

    def ready(self) -> bool:
        """True once the models are loaded (the driver waits for every actor)."""
        return True

    def run(self, index: int, refs: Sequence[WindowRef]) -> list[Row]:
        """Read and score ``refs``; results to ``part-<index>.parquet``; ``window`` rows back.

        A ``window`` row holds ``device`` and ``stats`` (the window's counters as JSON).
        """
        results: list[Row] = []
        windows: list[Row] = []
        for ref in refs:
            for w in self.builder.rows(ref):
                for row in self.score(w):
                    (windows if row["kind"] == "window" else results).append(row)
        if results:
            columns = result_columns(self.partition_columns)
            write_part(self.folder / f"part-{index:05d}.parquet", results, columns)
        return [{"device": w["device"], "stats": w["stats"]} for w in windows]

    def score(self, w: Row) -> list[Row]:
        """The rows of one window row."""
        st = ReplayStats()
        base = {c: w.get(c) for c in ("window_id", "device", "source", "closed_at")}
        base.update({c: w.get(c) for c in self.partition_columns})
        if w["status"] != "ok":
            _count_bad(st, w["status"], w["error"] or w["status"], w["window_id"] or w["location"])
            return [self._window_row(base, st, {}, w)]
        try:
            retained = parse_sidecar(w["sidecar"], w["location"]).manifest
            outcome, recs = rescore_window(
                w["archive"],
                retained,
                self.runners,
                self.segment_rows.get(retained.source),
                Sequencer(),
                w["archive_file"],
                models=self.source_models.get(retained.source),
            )
        except Exception as exc:  # a window the pipeline cannot read: counted, not raised
            _count_bad(st, "corrupt", f"{w['location']}: {type(exc).__name__}: {exc}", "")
            return [self._window_row(base, st, {}, w)]
        count_window(st, outcome, recs, len(w["archive"]))
        rows = [_result_row(base, i, doc) for i, doc in enumerate(recs)]
        return [*rows, self._window_row(base, st, _by_model(recs), w)]

    def _window_row(
        self, base: Row, st: ReplayStats, by_model: dict[str, dict[str, int]], w: Row
    ) -> Row:
        counters = st.as_dict()
        for k in ("seconds", "items_per_s", "models"):
            counters.pop(k)
        counters["by_model"] = by_model
        counters["s3_requests"] = w.get("s3_requests") or 0
        counters["s3_bytes"] = w.get("s3_bytes") or 0
        return {**base, "kind": "window", "stats": json.dumps(counters, sort_keys=True)}


def _count_bad(st: ReplayStats, status: str, error: str, window: str) -> None:
    """A window not scored, counted and named as the local replay does.

    ``refused`` is skipped (an error), ``missing`` a note (it does not fail the run).
    """
    if status == "refused":
        st.skip(window, error)
    elif status == "missing":
        st.miss(window, error)
    else:
        st.corrupt += 1
        st.errors.append(error)


def _result_row(base: Row, position: int, doc: Mapping[str, Any]) -> Row:
    was = doc.get("was") or {}
    row: Row = {**base, "kind": "failure" if "error" in doc else "result"}
    row.update(position=position, record=dumps_record(doc))
    for k in (
        "id",
        "item",
        "modality",
        "ts",
        "label",
        "score",
        "anomaly_score",
        "model",
        "model_version",
        "error",
        "message",
    ):
        row[k] = doc.get(k)
    row["anomaly"] = bool(doc.get("anomaly"))
    for k in _WAS:
        row[f"was_{k}"] = bool(was.get(k)) if k == "anomaly" else was.get(k)
    return row


def _by_model(recs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Results, failures and changes of one window per model (``name@version``)."""
    out: dict[str, dict[str, int]] = {}
    for doc in recs:
        key = f"{doc.get('model') or 'none'}@{doc.get('model_version') or ''}".rstrip("@")
        d = out.setdefault(
            key, {"items": 0, "failures": 0, "changed_labels": 0, "changed_anomalies": 0}
        )
        if "error" in doc:
            d["failures"] += 1
            continue
        label, anomaly = changes(doc)
        d["items"] += 1
        d["changed_labels"] += label
        d["changed_anomalies"] += anomaly
    return out


__all__ = [
    "RESULT_COLUMNS",
    "ModelShipment",
    "ReplayScorer",
    "result_columns",
    "ship_models",
    "write_part",
]
