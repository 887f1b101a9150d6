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
from typing import Any

import numpy as np

from cdml_edge.decode import (
    DecodeError,
    decode_audio,
    decode_csv,
    decode_image,
    decode_json,
    decode_text,
    decode_timeseries,
)
from cdml_edge.model.runner import ModelRunner, Prediction
from cdml_edge.model.spec import AudioInput, ImageInput, ModelSpecError, SeriesInput
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

SERIES_MODALITIES = ("csv", "timeseries")


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


@dataclass
class _Piece:
    """One unit the model scores: a whole item or one segment of a series."""

    item: ManifestItem
    modality: str
    suffix: str  # "" for a whole item, "#rows=0-255" for a segment
    array: np.ndarray | None  # prepared model input; None when the modality has no model


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
    """Score one window archive (its ``manifest.json`` says what is inside)."""
    from cdml_edge.archive import open_archive

    seq = sequencer or Sequencer()
    t0 = time.perf_counter()
    arc = open_archive(archive)
    manifest = WindowManifest.from_bytes(arc.read(MANIFEST_NAME), where=f"{archive_name}")
    failures: list[ItemFailure] = []
    members: list[bytes | None] = []
    try:
        members = list(arc.read_many([it.member for it in manifest.items]))
    except Exception:  # one bad member: read them one by one to find it
        for it in manifest.items:
            try:
                members.append(arc.read(it.member))
            except Exception as exc:
                failures.append(ItemFailure(it, type(exc).__name__, str(exc)))
                members.append(None)
    t_read = time.perf_counter()

    pieces: list[_Piece] = []
    for it, data in zip(manifest.items, members, strict=True):
        if data is None:
            continue
        modality = it.modality or manifest.modality
        try:
            pieces.extend(_decode_item(it, modality, data, runners.get(modality), segment_rows))
        except (DecodeError, ModelSpecError, ValueError) as exc:
            failures.append(ItemFailure(it, type(exc).__name__, str(exc)))
    t_decode = time.perf_counter()

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
    t_infer = time.perf_counter()

    results: list[ItemResult] = []
    outcomes: dict[str, ItemOutcome] = {}
    counts: dict[str, int] = {}
    topic = relative_topic("result", manifest.source)
    emitted = now()
    for i, p in enumerate(pieces):
        pred: Prediction | None = preds.get(i)
        runner = runners.get(p.modality) if pred is not None else None
        label = pred.label if pred else None
        results.append(
            ItemResult(
                id=p.item.id + p.suffix,
                window_id=manifest.window_id,
                source=manifest.source,
                item=p.item.name + p.suffix,
                modality=p.modality,
                ts=p.item.ts,
                label=label,
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
        key = label if label is not None else p.modality
        counts[key] = counts.get(key, 0) + 1
        outcomes[p.item.id] = _worst(outcomes.get(p.item.id), pred)
    for f in failures:
        outcomes[f.item.id] = ItemOutcome(error=f.error_type)
    if failures:
        counts["error"] = len(failures)

    model = next(iter(used.values()), None)
    scored = manifest.with_results(
        outcomes,
        model=model.name if model else None,
        model_version=model.version if model else None,
    )
    t_end = time.perf_counter()
    window = WindowResult(
        window_id=manifest.window_id,
        source=manifest.source,
        counts=counts,
        items=len(manifest.items) - len(failures),
        errors=len(failures),
        archive=ArchiveInfo(
            name=archive_name or f"{manifest.window_id}.{manifest.archive_format}",
            format=manifest.archive_format,
            bytes=len(archive),
            sha256=hashlib.sha256(archive).hexdigest(),
        ),
        opened_ts=manifest.opened_at,
        closed_ts=manifest.closed_at,
        timings=WindowTimings(
            pack_ms=round(pack_ms, 3),
            read_ms=round((t_read - t0) * 1000, 3),
            decode_ms=round((t_decode - t_read) * 1000, 3),
            infer_ms=round((t_infer - t_decode) * 1000, 3),
            total_ms=round(pack_ms + (t_end - t0) * 1000, 3),
        ),
        seq=seq.next(relative_topic("window", manifest.source)),
        device=device,
    )
    return WindowOutcome(scored, results, window, failures)


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


def _decode_item(
    it: ManifestItem,
    modality: str,
    data: bytes,
    runner: ModelRunner | None,
    segment_rows: int | None,
) -> list[_Piece]:
    spec_in = runner.spec.input if runner is not None else None
    name = it.name
    if modality == "image":
        size = spec_in.size if isinstance(spec_in, ImageInput) else None
        arr = decode_image(data, member=name, target_size=size)
        return [_Piece(it, modality, "", runner.prepare(arr) if runner else None)]
    if modality == "audio":
        kw: dict[str, Any] = spec_in.decode_kwargs() if isinstance(spec_in, AudioInput) else {}
        arr = decode_audio(data, member=name, **kw)
        return [_Piece(it, modality, "", runner.prepare(arr) if runner else None)]
    if modality in SERIES_MODALITIES:
        table = _series(data, name, modality, spec_in)
        if segment_rows is None or table.shape[0] <= segment_rows:
            return [_Piece(it, modality, "", runner.prepare(table) if runner else None)]
        out = []
        for start in range(0, table.shape[0], segment_rows):
            seg = table[start : start + segment_rows]
            suffix = f"#rows={start}-{start + seg.shape[0] - 1}"
            out.append(_Piece(it, modality, suffix, runner.prepare(seg) if runner else None))
        return out
    if modality == "json":
        decode_json(data, member=name)
    elif modality == "text":
        decode_text(data, member=name)
    else:
        raise DecodeError(name, f"no decoder for modality {modality!r}")
    return [_Piece(it, modality, "", None)]


def warm_up_decoder(modality: str, runner: ModelRunner | None) -> None:
    """Decode one synthetic input of ``modality`` so lazy imports (librosa, numba JIT) and
    first-call costs are paid at start-up, not by the first real window."""
    import io

    if modality == "audio":
        import soundfile as sf

        buf = io.BytesIO()
        sr = runner.spec.input.sample_rate if runner and isinstance(
            runner.spec.input, AudioInput) else 16000
        t = np.arange(sr // 4, dtype=np.float32) / sr
        sf.write(buf, 0.1 * np.sin(2 * np.pi * 440 * t), sr, format="WAV")
        data = buf.getvalue()
        name = "warmup.wav"
    elif modality == "image":
        import cv2

        ok, enc = cv2.imencode(".jpg", np.zeros((16, 16, 3), np.uint8))
        data, name = enc.tobytes(), "warmup.jpg"
    elif modality in SERIES_MODALITIES:
        spec_in = runner.spec.input if runner is not None else None
        cols = ["a"]
        if isinstance(spec_in, SeriesInput):
            cols = spec_in.columns or [f"c{i}" for i in range(spec_in.channels)]
        data = (",".join(cols) + "\n" + ",".join("0" for _ in cols) + "\n").encode()
        name = "warmup.csv"
    else:
        return
    item = ManifestItem(id="warmup", member=name, name=name, size=len(data), mtime_ns=0, ts=0.0,
                        sha256=hashlib.sha256(data).hexdigest())
    pieces = _decode_item(item, modality, data, runner, None)
    if runner is not None and pieces and pieces[0].array is not None:
        runner.run(np.stack([p.array for p in pieces if p.array is not None]))


def _series(data: bytes, name: str, modality: str, spec_in: Any) -> np.ndarray:
    if modality == "timeseries" and not name.lower().endswith((".csv", ".tsv")):
        return decode_timeseries(data, member=name)
    table = decode_csv(data, member=name)
    if table.values.shape[0] == 0:
        raise DecodeError(name, "CSV has no data rows")
    if isinstance(spec_in, SeriesInput) and spec_in.columns:
        missing = [c for c in spec_in.columns if c not in table.columns]
        if missing:
            raise DecodeError(name, f"CSV lacks the model's columns {missing}")
        cols = [table.columns.index(c) for c in spec_in.columns]
        return np.ascontiguousarray(table.values[:, cols])
    return table.values
