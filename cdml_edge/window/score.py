"""One window, start to finish: archive bytes -> reader -> decoders -> model -> payloads.

:func:`process_window` is a pure step — no watchers, threads or output — so the live agent
and offline replay score a window with exactly the same code. It opens the archive from
memory through the archive reader, reads ``manifest.json`` and the members, decodes each
member by its modality, runs one batch per modality and returns an :class:`WindowOutcome`
holding the per-item results, the window result, the manifest with results filled in and
the items that failed (bad inputs), which the caller quarantines.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from cdml_edge.decode import DecodeError
from cdml_edge.model.runner import ModelRunner, Prediction
from cdml_edge.model.spec import ModelSpecError
from cdml_edge.window.inputs import MODEL_INPUTS
from cdml_edge.window.manifest import MANIFEST_NAME, ItemOutcome, ManifestItem, WindowManifest
from cdml_edge.window.payloads import (
    ArchiveInfo,
    ErrorEvent,
    ItemResult,
    OutMessage,
    Sequencer,
    WindowResult,
    WindowTimings,
    relative_topic,
)
from cdml_edge.window.pieces import Piece, item_pieces


@dataclass(frozen=True)
class ItemFailure:
    """An item that could not be read, decoded or prepared (a bad input)."""

    item: ManifestItem
    error_type: str
    message: str


@dataclass
class WindowOutcome:
    """Everything one window produced."""

    manifest: WindowManifest
    results: list[ItemResult]
    window: WindowResult
    failures: list[ItemFailure] = field(default_factory=list)

    def messages(self) -> list[OutMessage]:
        """Result messages then the window message, topics relative to ``{prefix}/{device}``."""
        src = self.window.source
        out = [
            OutMessage(relative_topic("result", src), r.model_dump_json().encode())
            for r in self.results
        ]
        window = self.window.model_dump_json().encode()
        out.append(OutMessage(relative_topic("window", src), window))
        return out


def process_window(
    archive: bytes,
    runners: Mapping[str, ModelRunner],
    *,
    device: str,
    segment_rows: int | None = None,
    sequencer: Sequencer | None = None,
    archive_name: str | None = None,
    pack_ms: float = 0.0,
    now: Callable[[], float] = time.time,
) -> WindowOutcome:
    """Score one window archive (its ``manifest.json`` says what is inside).

    Steps: read the manifest and members, decode them into model pieces, run one batch per
    modality, build the results. A member that cannot be read, decoded or prepared becomes
    an :class:`ItemFailure`; the rest of the window is scored.
    """
    seq = sequencer or Sequencer()
    t0 = time.perf_counter()
    manifest, members, failures = _read_members(archive, archive_name)
    t_read = time.perf_counter()
    pieces, bad = _decode_members(manifest, members, runners, segment_rows)
    failures += bad
    t_decode = time.perf_counter()
    preds, used = _infer(pieces, runners)
    t_infer = time.perf_counter()
    results = _item_results(manifest, pieces, preds, runners, seq, device, emitted=now())
    counts = _counts(pieces, preds, failures)
    model = next(iter(used.values()), None)
    scored = manifest.with_results(
        _item_outcomes(pieces, preds, failures),
        model=model.name if model else None,
        model_version=model.version if model else None,
    )
    t_end = time.perf_counter()
    timings = WindowTimings(
        pack_ms=round(pack_ms, 3),
        read_ms=round((t_read - t0) * 1000, 3),
        decode_ms=round((t_decode - t_read) * 1000, 3),
        infer_ms=round((t_infer - t_decode) * 1000, 3),
        total_ms=round(pack_ms + (t_end - t0) * 1000, 3),
    )
    window = _window_result(
        manifest, archive, archive_name, counts, len(failures), timings,
        seq=seq.next(relative_topic("window", manifest.source)), device=device,
    )
    return WindowOutcome(scored, results, window, failures)


def _read_members(
    archive: bytes, archive_name: str | None
) -> tuple[WindowManifest, list[bytes | None], list[ItemFailure]]:
    """The manifest and each item's bytes (``None`` for a member that cannot be read)."""
    from cdml_edge.archive import open_archive

    arc = open_archive(archive)
    manifest = WindowManifest.from_bytes(arc.read(MANIFEST_NAME), where=f"{archive_name}")
    try:
        return manifest, list(arc.read_many([it.member for it in manifest.items])), []
    except Exception:  # one bad member: read them one by one to find it
        pass
    members: list[bytes | None] = []
    failures: list[ItemFailure] = []
    for it in manifest.items:
        try:
            members.append(arc.read(it.member))
        except Exception as exc:
            failures.append(ItemFailure(it, type(exc).__name__, str(exc)))
            members.append(None)
    return manifest, members, failures


def _decode_members(
    manifest: WindowManifest,
    members: list[bytes | None],
    runners: Mapping[str, ModelRunner],
    segment_rows: int | None,
) -> tuple[list[Piece], list[ItemFailure]]:
    """Each read member decoded and prepared for its modality's model, in manifest order."""
    pieces: list[Piece] = []
    failures: list[ItemFailure] = []
    for it, data in zip(manifest.items, members, strict=True):
        if data is None:
            continue
        modality = it.modality or manifest.modality
        try:
            pieces.extend(item_pieces(it, modality, data, runners.get(modality), segment_rows))
        except (DecodeError, ModelSpecError, ValueError) as exc:
            failures.append(ItemFailure(it, type(exc).__name__, str(exc)))
    return pieces, failures


def _infer(
    pieces: list[Piece], runners: Mapping[str, ModelRunner]
) -> tuple[dict[int, Prediction], dict[str, ModelRunner]]:
    """One batch per modality: predictions by piece index, and the runners that ran."""
    preds: dict[int, Prediction] = {}
    used: dict[str, ModelRunner] = {}
    for modality in sorted({p.modality for p in pieces}):
        idx = [i for i, p in enumerate(pieces) if p.modality == modality and p.array is not None]
        runner = runners.get(modality)
        if not idx or runner is None:
            continue
        batch = np.stack([pieces[i].array for i in idx])  # type: ignore[misc]
        for i, one in zip(idx, runner.run(batch), strict=True):
            preds[i] = one
        used[modality] = runner
    return preds, used


def _item_results(
    manifest: WindowManifest,
    pieces: list[Piece],
    preds: dict[int, Prediction],
    runners: Mapping[str, ModelRunner],
    seq: Sequencer,
    device: str,
    *,
    emitted: float,
) -> list[ItemResult]:
    """One result per piece, numbered on the source's result topic."""
    topic = relative_topic("result", manifest.source)
    results: list[ItemResult] = []
    for i, p in enumerate(pieces):
        pred = preds.get(i)
        runner = runners.get(p.modality) if pred is not None else None
        results.append(
            ItemResult(
                id=p.item.id + p.suffix,
                window_id=manifest.window_id,
                source=manifest.source,
                item=p.item.name + p.suffix,
                modality=p.modality,
                ts=p.item.ts,
                label=pred.label if pred else None,
                score=pred.score if pred else None,
                anomaly=pred.anomaly if pred else False,
                anomaly_score=pred.anomaly_score if pred else None,
                latency_ms=round(max(0.0, emitted - p.item.ts) * 1000.0, 3),
                model=runner.name if runner else "none",
                model_version=runner.version if runner else None,
                seq=seq.next(topic),
                device=device,
            )
        )
    return results


def _item_outcomes(
    pieces: list[Piece], preds: dict[int, Prediction], failures: list[ItemFailure]
) -> dict[str, ItemOutcome]:
    """The manifest's per-item outcome: the most anomalous piece, or the error."""
    outcomes: dict[str, ItemOutcome] = {}
    for i, p in enumerate(pieces):
        outcomes[p.item.id] = _worst(outcomes.get(p.item.id), preds.get(i))
    for f in failures:
        outcomes[f.item.id] = ItemOutcome(error=f.error_type)
    return outcomes


def _counts(
    pieces: list[Piece], preds: dict[int, Prediction], failures: list[ItemFailure]
) -> dict[str, int]:
    """Pieces per label (per modality when unlabelled), then ``error``: failed items."""
    counts: dict[str, int] = {}
    for i, p in enumerate(pieces):
        pred = preds.get(i)
        key = pred.label if pred and pred.label is not None else p.modality
        counts[key] = counts.get(key, 0) + 1
    if failures:
        counts["error"] = len(failures)
    return counts


def _window_result(
    manifest: WindowManifest,
    archive: bytes,
    archive_name: str | None,
    counts: dict[str, int],
    errors: int,
    timings: WindowTimings,
    *,
    seq: int,
    device: str,
) -> WindowResult:
    """The window message: counts, the archive's name, size and hash, timings."""
    return WindowResult(
        window_id=manifest.window_id,
        source=manifest.source,
        counts=counts,
        items=len(manifest.items) - errors,
        errors=errors,
        archive=ArchiveInfo(
            name=archive_name or f"{manifest.window_id}.{manifest.archive_format}",
            format=manifest.archive_format,
            bytes=len(archive),
            sha256=hashlib.sha256(archive).hexdigest(),
        ),
        opened_ts=manifest.opened_at,
        closed_ts=manifest.closed_at,
        timings=timings,
        seq=seq,
        device=device,
    )


def error_event(
    source: str,
    item: str | None,
    error_type: str,
    message: str,
    *,
    device: str,
    sequencer: Sequencer,
    quarantined_path: str | None = None,
    ts: float | None = None,
) -> OutMessage:
    """An :class:`ErrorEvent` message on ``{source}/error``."""
    topic = relative_topic("error", source)
    ev = ErrorEvent(
        source=source,
        item=item,
        error_type=error_type,
        message=message[:2000],
        quarantined_path=quarantined_path,
        ts=time.time() if ts is None else ts,
        seq=sequencer.next(topic),
        device=device,
    )
    return OutMessage(topic, ev.model_dump_json().encode())


def _worst(prev: ItemOutcome | None, pred: Prediction | None) -> ItemOutcome:
    """Per-item outcome for the manifest; for segmented series keep the most anomalous."""
    cur = ItemOutcome(
        label=pred.label if pred else None,
        score=pred.score if pred else None,
        anomaly=pred.anomaly if pred else False,
        anomaly_score=pred.anomaly_score if pred else None,
    )
    if prev is None:
        return cur
    if (cur.anomaly, cur.anomaly_score or 0.0) > (prev.anomaly, prev.anomaly_score or 0.0):
        return cur
    return prev


def warm_up_decoder(modality: str, runner: ModelRunner | None) -> None:
    """Decode one synthetic input of ``modality`` so lazy imports (librosa, numba JIT) and
    first-call costs are paid at start-up, not by the first real window."""
    entry = MODEL_INPUTS.get(modality)
    if entry is None or entry.warm_up_sample is None:
        return
    name, data = entry.warm_up_sample(runner.spec.input if runner is not None else None)
    item = ManifestItem(id="warmup", member=name, name=name, size=len(data), mtime_ns=0, ts=0.0,
                        sha256=hashlib.sha256(data).hexdigest())
    pieces = item_pieces(item, modality, data, runner, None)
    if runner is not None and pieces and pieces[0].array is not None:
        runner.run(np.stack([p.array for p in pieces if p.array is not None]))
