"""One window, start to finish: archive bytes -> reader -> decoders -> model -> payloads.

:func:`score_window` is a pure step — no watchers, threads or output — so the live agent
and offline replay score a window with exactly the same code. It opens the archive from
memory through the archive reader, reads ``manifest.json`` and the members, decodes each
member by its modality, runs one batch per modality and returns an :class:`WindowOutcome`
holding the per-item results, the window result, the manifest with results filled in and
the items that failed (bad inputs), which the caller quarantines.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cdml_edge.config import ResultsMode
from cdml_edge.decode import DecodeError
from cdml_edge.model.runner import ModelRunner, Prediction
from cdml_edge.model.spec import ModelSpecError
from cdml_edge.window.inputs import MODEL_INPUTS
from cdml_edge.window.manifest import MANIFEST_NAME, ManifestItem, WindowManifest
from cdml_edge.window.payloads import (
    ArchiveInfo,
    ErrorEvent,
    ItemResult,
    WindowResult,
    WindowTimings,
)
from cdml_edge.window.pieces import Piece, as_runners, item_pieces, model_batch
from cdml_edge.window.topics import OutMessage, Sequencer, relative_topic
from cdml_edge.window.verdicts import (
    ItemFailure,
    count_pieces,
    item_outcomes,
    item_results,
    verdict,
)


@dataclass
class WindowOutcome:
    """Everything one window produced."""

    manifest: WindowManifest
    results: list[ItemResult]
    window: WindowResult
    failures: list[ItemFailure] = field(default_factory=list)

    def messages(self, results: ResultsMode = "item") -> list[OutMessage]:
        """The messages to publish, topics relative to ``{prefix}/{device}``.

        ``results`` (``mqtt.results``): ``item``, one result message per item then the window
        message; ``window``, the window message alone with the item results in it.
        """
        src = self.window.source
        if results == "window":
            window = self.window.model_copy(update={"results": self.results})
            return [OutMessage(relative_topic("window", src), window.model_dump_json().encode())]
        out = [
            OutMessage(relative_topic("result", src), r.model_dump_json().encode())
            for r in self.results
        ]
        out.append(
            OutMessage(relative_topic("window", src), self.window.model_dump_json().encode())
        )
        return out


def score_window(
    archive: bytes,
    runners: Mapping[str, ModelRunner],
    *,
    device: str,
    models: Sequence[str] | None = None,
    segment_rows: int | None = None,
    sequencer: Sequencer | None = None,
    archive_name: str | None = None,
    pack_ms: float = 0.0,
    now: Callable[[], float] = time.time,
) -> WindowOutcome:
    """Score one window archive (its ``manifest.json`` says what is inside).

    Steps: read the manifest and members, decode them into model pieces, run one batch per
    model, build the results. ``models`` names the runners that score the window's modality,
    the first giving the label (default: every runner of that modality); items of another
    modality go to every runner of theirs. A member that cannot be read, decoded or prepared
    becomes an :class:`ItemFailure`; the rest of the window is scored.
    """
    seq = sequencer or Sequencer()
    t0 = time.perf_counter()
    manifest, members, failures = _read_members(archive, archive_name)
    t_read = time.perf_counter()
    pick = runners_for(runners, models, manifest.modality)
    pieces, bad = _decode_members(manifest, members, pick, segment_rows)
    failures += bad
    t_decode = time.perf_counter()
    pieces, preds = _infer_finite(pieces, runners, failures)
    t_infer = time.perf_counter()
    verdicts = [verdict(p, preds.get(i, {}), runners) for i, p in enumerate(pieces)]
    results = item_results(manifest, pieces, verdicts, seq, device, emitted=now())
    counts, per_model = count_pieces(pieces, verdicts, failures)
    model = next((v.runner for v in verdicts if v.runner is not None), None)
    scored = manifest.with_results(
        item_outcomes(pieces, verdicts, failures),
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
        manifest,
        archive,
        archive_name,
        counts,
        len(failures),
        timings,
        seq=seq.next(relative_topic("window", manifest.source)),
        device=device,
    )
    if per_model is not None:
        window = window.model_copy(update={"models": per_model})
    return WindowOutcome(scored, results, window, failures)


Pick = Callable[[str], dict[str, ModelRunner]]


def runners_for(
    runners: Mapping[str, ModelRunner], models: Sequence[str] | None, modality: str
) -> Pick:
    """Per item modality, the runners that score it, by name and in order.

    ``models`` for the window's own modality when given, else every runner of that modality.
    """

    def pick(m: str) -> dict[str, ModelRunner]:
        if models is not None and m == modality:
            return {k: runners[k] for k in models if k in runners}
        return {k: r for k, r in runners.items() if r.modality == m}

    return pick


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
    pick: Pick,
    segment_rows: int | None,
) -> tuple[list[Piece], list[ItemFailure]]:
    """Each read member decoded and prepared for its models, in manifest order."""
    pieces: list[Piece] = []
    failures: list[ItemFailure] = []
    for it, data in zip(manifest.items, members, strict=True):
        if data is None:
            continue
        modality = it.modality or manifest.modality
        try:
            pieces.extend(item_pieces(it, modality, data, pick(modality), segment_rows))
        except (DecodeError, ModelSpecError, ValueError) as exc:
            failures.append(ItemFailure(it, type(exc).__name__, str(exc)))
    return pieces, failures


def _infer(
    pieces: list[Piece], runners: Mapping[str, ModelRunner]
) -> dict[int, dict[str, Prediction]]:
    """One batch per model: each piece's predictions by model name."""
    preds: dict[int, dict[str, Prediction]] = {}
    for name, runner in runners.items():
        idx = [i for i, p in enumerate(pieces) if name in p.inputs]
        if not idx:
            continue
        batch = model_batch([pieces[i] for i in idx], name, runner)
        geometry = [pieces[i].geometry.get(name) for i in idx]
        for i, one in zip(idx, runner.run(batch, geometry), strict=True):
            preds.setdefault(i, {})[name] = one
    return preds


def _infer_finite(
    pieces: list[Piece], runners: Mapping[str, ModelRunner], failures: list[ItemFailure]
) -> tuple[list[Piece], dict[int, dict[str, Prediction]]]:
    """:func:`_infer`, then the items given a score that is not finite added to ``failures``."""
    pieces, preds, unscored = drop_unscored(pieces, _infer(pieces, runners), runners)
    failures += unscored
    return pieces, preds


def drop_unscored(
    pieces: list[Piece], preds: dict[int, dict[str, Prediction]], runners: Mapping[str, ModelRunner]
) -> tuple[list[Piece], dict[int, dict[str, Prediction]], list[ItemFailure]]:
    """The items a model gave a score that is not a finite number, as failures.

    Any score it publishes counts: the label's, the anomaly score, the top k, the
    detections. A NaN compares false with every threshold, so such an item read as normal. Its input
    held values its model cannot take (an inf, numbers beyond float32); every piece of the
    item goes, and the rest keep their predictions, renumbered.
    """
    bad: dict[str, ItemFailure] = {}
    for i, p in enumerate(pieces):
        for name, pred in preds.get(i, {}).items():
            value = next((v for v in _scores(pred) if not _finite(v)), None)
            if value is not None and p.item.id not in bad:
                bad[p.item.id] = ItemFailure(
                    p.item,
                    "NonFiniteScore",
                    f"model {runners[name].name} gave a score that is not finite ({value}): "
                    "the input holds values it cannot take (an inf, or numbers beyond float32)",
                )
    if not bad:
        return pieces, preds, []
    keep = [i for i, p in enumerate(pieces) if p.item.id not in bad]
    kept_preds = {n: preds[i] for n, i in enumerate(keep) if i in preds}
    return [pieces[i] for i in keep], kept_preds, list(bad.values())


def _scores(pred: Prediction) -> list[float | None]:
    """Every number a prediction publishes: its score, anomaly score, top k, detections."""
    out: list[float | None] = [pred.score, pred.anomaly_score]
    out += [score for _, score in pred.top_k or ()]
    out += [d.score for d in pred.detections or ()]
    return out


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


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


def warm_up_decoder(modality: str, runners: Mapping[str, ModelRunner] | ModelRunner | None) -> None:
    """Decode one synthetic input of ``modality``; run it through each runner of that modality.

    So lazy imports (soundfile, SciPy's FFT) and first-call costs are paid at start-up, not by the
    first real window.
    """
    entry = MODEL_INPUTS.get(modality)
    if entry is None or entry.warm_up_sample is None:
        return
    models = {k: r for k, r in as_runners(runners).items() if r.modality == modality}
    first = next(iter(models.values()), None)
    name, data = entry.warm_up_sample(first.spec.input if first is not None else None)
    item = ManifestItem(
        id="warmup",
        member=name,
        name=name,
        size=len(data),
        mtime_ns=0,
        ts=0.0,
        sha256=hashlib.sha256(data).hexdigest(),
    )
    pieces = item_pieces(item, modality, data, models, None)
    for key, runner in models.items():
        scored = [p for p in pieces if key in p.inputs]
        if scored:
            runner.raw(model_batch(scored, key, runner))
