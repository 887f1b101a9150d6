"""Offline replay: re-score retained windows with the current pipeline and models.

Windows are read from the retention folder in archive order (close time, then window id)
and each archive's bytes go through :func:`cdml_edge.window.score.score_window` — the
very function the live agent uses — as fast as the machine allows. Replay never writes
into the retention folder, so it can run beside a live agent.

Results are deterministic: a record holds no wall-clock field (no latency, no timings),
the sequence numbers start from one per run and ``now`` is pinned to each window's close
time. The same windows scored by the same model give a byte-identical results file. Each
record also carries what the model said when the window was retained (``was``), so a new
model can be compared with the deployed one before it is rolled out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdml_edge.fsio import UMASK, atomic_writer
from cdml_edge.retrain.errors import ReplayError
from cdml_edge.retrain.outfile import cannot_write, sweep_stale_temps
from cdml_edge.store.catalog import WindowRecord
from cdml_edge.store.ondisk import read_regular, regular_size
from cdml_edge.store.sidecar import ArchiveRef, RetentionError, list_retained, read_sidecar
from cdml_edge.window.manifest import ItemOutcome, WindowManifest
from cdml_edge.window.topics import OutMessage, Sequencer

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import ResultsMode
    from cdml_edge.model.runner import ModelRunner
    from cdml_edge.window.score import WindowOutcome

log = logging.getLogger(__name__)

REPLAY_TOPIC = "replay"  # published below {prefix}/{device}/replay/{source}/...
_DROP = frozenset({"latency_ms", "seq"})  # wall-clock / per-run fields


@dataclass
class ReplayStats:
    """What a replay run did."""

    windows: int = 0
    items: int = 0
    failures: int = 0
    missing: int = 0  # its archive gone (evicted, never uploaded): does not fail the run
    corrupt: int = 0  # archive bytes differ from the SHA-256 its sidecar recorded
    skipped: int = 0  # refused: pointing outside the ring, a link, a special file, too large
    duplicates: int = 0  # a copy of a window already taken (the same archive SHA-256)
    errors: list[str] = field(default_factory=list)  # one line per corrupt or skipped window
    notes: list[str] = field(default_factory=list)  # one per missing or duplicate window
    changed_labels: int = 0
    changed_anomalies: int = 0
    first_verdicts: int = 0  # results of windows retained without a model (nothing to change)
    by_modality: dict[str, int] = field(default_factory=dict)  # results per modality
    bytes_read: int = 0
    seconds: float = 0.0
    models: dict[str, str] = field(default_factory=dict)

    @property
    def items_per_s(self) -> float:
        """Items scored per second of scoring; 0.0 when no time was measured."""
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def skip(self, what: str, reason: str) -> None:
        """Count a window that was not replayed, named with the reason."""
        self.skipped += 1
        self.errors.append(f"{ascii(what)[1:-1]}: {reason}; window skipped")

    def miss(self, what: str, reason: str) -> None:
        """Count a window whose archive is gone, named (it does not fail the run)."""
        self.missing += 1
        self.notes.append(missing_note(what, reason))

    def duplicate(self, copy: str, first: str) -> None:
        """Count a copy of a window already taken, named with the one taken."""
        self.duplicates += 1
        self.notes.append(duplicate_note(copy, first))

    def as_dict(self) -> dict[str, Any]:
        """Every counter, ``seconds`` rounded, plus ``items_per_s`` (JSON-ready copies)."""
        return {
            "windows": self.windows,
            "items": self.items,
            "failures": self.failures,
            "missing": self.missing,
            "corrupt": self.corrupt,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "errors": list(self.errors),
            "notes": list(self.notes),
            "changed_labels": self.changed_labels,
            "changed_anomalies": self.changed_anomalies,
            "first_verdicts": self.first_verdicts,
            "by_modality": dict(self.by_modality),
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "items_per_s": round(self.items_per_s, 1),
            "models": dict(self.models),
        }


def missing_note(what: str, reason: str) -> str:
    """How a summary names a window whose archive is gone (``missing``), on both engines."""
    return f"{ascii(what)[1:-1]}: {reason}; window missing"


def duplicate_note(copy: str, first: str) -> str:
    """How a summary names a copy of a window already taken (``duplicates``), on both engines.

    ``copy`` and ``first``: their sidecars.
    """
    return (
        f"{ascii(copy)[1:-1]}: the same window archive (SHA-256) as {ascii(first)[1:-1]}; "
        "skipped as a duplicate window"
    )


@dataclass(frozen=True)
class ReplayedWindow:
    """One window scored again: its catalog record, the new outcome and result records."""

    record: WindowRecord
    retained: WindowManifest
    outcome: WindowOutcome
    records: list[dict[str, Any]]

    def messages(self, results: ResultsMode = "item") -> list[OutMessage]:
        """The outcome's messages on ``replay/{source}/...`` (not the live topics).

        ``results`` as the live agent's (``mqtt.results``).
        """
        return [
            OutMessage(f"{REPLAY_TOPIC}/{m.topic}", m.payload, m.retain, m.qos)
            for m in self.outcome.messages(results)
        ]


def _was(res: ItemOutcome | None, manifest: WindowManifest) -> dict[str, Any] | None:
    if res is None:
        return None
    return {
        "label": res.label,
        "score": res.score,
        "anomaly": res.anomaly,
        "anomaly_score": res.anomaly_score,
        "error": res.error,
        "model": manifest.model,
        "model_version": manifest.model_version,
    }


def result_records(outcome: WindowOutcome, retained: WindowManifest) -> list[dict[str, Any]]:
    """Deterministic records of one re-scored window: results, then failures."""
    out: list[dict[str, Any]] = []
    for r in outcome.results:
        doc = {k: v for k, v in r.model_dump(mode="json").items() if k not in _DROP}
        doc["was"] = _was(retained.results.get(r.id.split("#", 1)[0]), retained)
        out.append(doc)
    for f in outcome.failures:
        out.append(
            {
                "id": f.item.id,
                "window_id": retained.window_id,
                "source": retained.source,
                "item": f.item.name,
                "error": f.error_type,
                "message": f.message,
                "was": _was(retained.results.get(f.item.id), retained),
            }
        )
    return out


def iter_replay(
    directory: str | Path,
    runners: Mapping[str, ModelRunner],
    *,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    segment_rows: Mapping[str, int | None] | None = None,
    stats: ReplayStats | None = None,
    records: list[WindowRecord] | None = None,
    models: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[ReplayedWindow]:
    """Score every retained window (archive order) again; yields one result per window.

    ``models``: per source, the names of the runners that score it (default: by modality).
    Each window is scored once: a copy of one already taken (the same archive SHA-256 in
    its sidecar, under another name) is counted in ``duplicates`` and named, never read.
    """
    d = Path(directory)
    st = stats if stats is not None else ReplayStats()
    st.models = {m: f"{r.name}@{r.version}" for m, r in sorted(runners.items())}
    seq = Sequencer()
    rows = segment_rows or {}
    todo = records if records is not None else list_retained(d, since, until, source)
    taken: dict[str, str] = {}  # archive SHA-256 -> the sidecar of the window taken
    for rec in todo:
        loaded = _load_window(d, rec, st, taken)
        if loaded is None:
            continue
        retained, archive = loaded
        t0 = time.perf_counter()
        outcome, recs = rescore_window(
            archive,
            retained,
            runners,
            rows.get(retained.source),
            seq,
            rec.file,
            models=(models or {}).get(retained.source),
        )
        st.seconds += time.perf_counter() - t0
        count_window(st, outcome, recs, len(archive))
        yield ReplayedWindow(rec, retained, outcome, recs)


def rescore_window(
    archive: bytes,
    retained: WindowManifest,
    runners: Mapping[str, ModelRunner],
    segment_rows: int | None,
    sequencer: Sequencer,
    archive_name: str,
    models: Sequence[str] | None = None,
) -> tuple[WindowOutcome, list[dict[str, Any]]]:
    """One retained window scored again and its deterministic result records.

    The clock is pinned to the window's close time.
    """
    from cdml_edge.window.score import score_window

    outcome = score_window(
        archive,
        runners,
        device=retained.device,
        models=models,
        segment_rows=segment_rows,
        sequencer=sequencer,
        archive_name=archive_name,
        now=_fixed_clock(retained.closed_at),
    )
    return outcome, result_records(outcome, retained)


def _load_window(
    directory: Path, rec: WindowRecord, st: ReplayStats, taken: dict[str, str]
) -> tuple[WindowManifest, bytes] | None:
    """A retained window's manifest and archive bytes, or None (counted).

    None when it is gone, a copy of a window in ``taken`` (archive SHA-256 -> sidecar; this
    one is added), or its bytes differ from the SHA-256 its sidecar recorded.
    """
    try:
        sidecar = read_sidecar(directory / rec.sidecar)
        first = taken.get(sidecar.archive.sha256)
        if first is not None:  # a copy, unless its archive is gone or refused (raised)
            regular_size(directory / sidecar.archive.file)
            st.duplicate(rec.sidecar, first)
            return None
        archive = read_regular(directory / sidecar.archive.file, sidecar.archive.bytes)
    except RetentionError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):  # evicted, or never uploaded
            log.info("replay: window %s skipped: %s", rec.window_id, exc)
            st.miss(rec.window_id, str(exc))
        else:  # a link, a special file, a size other than recorded: refused, named
            log.info("replay: window %s skipped: %s", rec.window_id, exc)  # named in errors
            st.skip(rec.window_id, str(exc))
        return None
    taken[sidecar.archive.sha256] = rec.sidecar
    msg = archive_mismatch(sidecar.archive, archive, rec.window_id)
    if msg is not None:
        # info, not warning: the error line names it (a warning printed it a second time)
        log.info("replay: %s", msg)
        st.corrupt += 1
        st.errors.append(msg)
        return None
    return sidecar.manifest, archive


def archive_mismatch(ref: ArchiveRef, archive: bytes, window_id: str) -> str | None:
    """Why ``archive`` is not the retained archive ``ref`` names, or None when it is.

    The check is the SHA-256 ``ref`` recorded.
    """
    digest = hashlib.sha256(archive).hexdigest()
    if digest == ref.sha256:
        return None
    return (
        f"{ref.file}: SHA-256 {digest} differs from the retained "
        f"{ref.sha256}; window {window_id} skipped"
    )


def count_window(
    st: ReplayStats, outcome: WindowOutcome, recs: list[dict[str, Any]], nbytes: int
) -> None:
    """Add one re-scored window (``nbytes`` archive bytes) to ``st``."""
    st.windows += 1
    st.bytes_read += nbytes
    st.items += len(outcome.results)
    st.failures += len(outcome.failures)
    for doc in recs:
        if "error" not in doc:
            st.by_modality[doc["modality"]] = st.by_modality.get(doc["modality"], 0) + 1
        if is_first_verdict(doc):  # retained unscored: a first verdict, not a change
            st.first_verdicts += 1
            continue
        label, anomaly = changes(doc)
        st.changed_labels += label
        st.changed_anomalies += anomaly


def is_first_verdict(doc: Mapping[str, Any]) -> bool:
    """Whether a result record scores an item that was retained without a model."""
    was = doc.get("was")
    return was is not None and "error" not in doc and was["model"] is None


def changes(doc: Mapping[str, Any]) -> tuple[int, int]:
    """Whether one result record changed its label and its anomaly flag against ``was``.

    0/1 each; 0 for failures, items without an earlier verdict and first verdicts.
    """
    was = doc.get("was")
    if was is None or "error" in doc or is_first_verdict(doc):
        return 0, 0
    return int(doc.get("label") != was["label"]), int(
        bool(doc.get("anomaly")) != bool(was["anomaly"])
    )


def _fixed_clock(t: float) -> Callable[[], float]:
    return lambda: t


def dumps_record(doc: Mapping[str, Any]) -> str:
    """Canonical JSON line (sorted keys, compact)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def replay_to_jsonl(
    directory: str | Path,
    runners: Mapping[str, ModelRunner],
    out: str | Path,
    *,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    segment_rows: Mapping[str, int | None] | None = None,
    on_window: Callable[[ReplayedWindow], None] | None = None,
    records: list[WindowRecord] | None = None,
    models: Mapping[str, Sequence[str]] | None = None,
) -> ReplayStats:
    """Replay into a JSON-lines file, written atomically (whole or not at all).

    :class:`ReplayError` names the file when it cannot be written (a full disk).
    """
    st = ReplayStats()
    target = Path(out)
    # room a killed replay held: its results file, its picture's staging folder
    st.notes.extend(sweep_stale_temps(target.parent, (".jsonl",)))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(target, mode=UMASK, tmp_suffix=".jsonl") as fh:
            for win in iter_replay(
                directory,
                runners,
                since=since,
                until=until,
                source=source,
                segment_rows=segment_rows,
                stats=st,
                records=records,
                models=models,
            ):
                fh.write("".join(dumps_record(doc) + "\n" for doc in win.records).encode("utf-8"))
                if on_window is not None:
                    on_window(win)
    except OSError as exc:  # a full disk, a folder where the file goes: named
        raise ReplayError(cannot_write(target, exc)) from exc
    return st
