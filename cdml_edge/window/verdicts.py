"""What a window's models said, per piece: verdict, result payloads, manifest outcomes, counts.

The verdict is the first model's label, and an anomaly when any model flags one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdml_edge.model.runner import ModelRunner, Prediction
from cdml_edge.window.manifest import ItemOutcome, ManifestItem, WindowManifest
from cdml_edge.window.payloads import DetectionPayload, ItemResult, LabelScore, ModelVerdict
from cdml_edge.window.pieces import Piece
from cdml_edge.window.topics import Sequencer, relative_topic


@dataclass(frozen=True)
class ItemFailure:
    """An item that could not be read, decoded or prepared (a bad input)."""

    item: ManifestItem
    error_type: str
    message: str


@dataclass(frozen=True)
class Verdict:
    """A piece's predictions in its models' order; the first is the label."""

    runner: ModelRunner | None
    pred: Prediction | None
    by_model: dict[str, tuple[ModelRunner, Prediction]]

    @property
    def anomaly(self) -> bool:
        """Whether any of the piece's models flags an anomaly."""
        return any(p.anomaly for _, p in self.by_model.values())


def verdict(
    piece: Piece, preds: dict[str, Prediction], runners: Mapping[str, ModelRunner]
) -> Verdict:
    """The :class:`Verdict` of one piece from its models' predictions, in the piece's order."""
    by_model = {k: (runners[k], preds[k]) for k in piece.inputs if k in preds}
    first = next(iter(by_model.values()), None)
    return Verdict(first[0] if first else None, first[1] if first else None, by_model)


def item_results(
    manifest: WindowManifest,
    pieces: list[Piece],
    verdicts: list[Verdict],
    seq: Sequencer,
    device: str,
    *,
    emitted: float,
) -> list[ItemResult]:
    """One result per piece, numbered on the source's result topic."""
    topic = relative_topic("result", manifest.source)
    results: list[ItemResult] = []
    for p, v in zip(pieces, verdicts, strict=True):
        pred, runner = v.pred, v.runner
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
                anomaly=v.anomaly,
                anomaly_score=pred.anomaly_score if pred else None,
                latency_ms=round(max(0.0, emitted - p.item.ts) * 1000.0, 3),
                model=runner.name if runner else "none",
                model_version=runner.version if runner else None,
                seq=seq.next(topic),
                device=device,
                top_k=top_k_payload(pred),
                detections=detections_payload(pred),
                models=model_verdicts(v) if len(v.by_model) > 1 else None,
            )
        )
    return results


def model_verdicts(v: Verdict) -> dict[str, ModelVerdict]:
    """Each model's verdict on the piece, by model name (for a piece with several models)."""
    return {
        name: ModelVerdict(
            model=r.name,
            model_version=r.version,
            kind=r.kind,
            label=p.label,
            score=p.score,
            anomaly=p.anomaly,
            anomaly_score=p.anomaly_score,
            top_k=top_k_payload(p),
            detections=detections_payload(p),
        )
        for name, (r, p) in v.by_model.items()
    }


def top_k_payload(pred: Prediction | None) -> list[LabelScore] | None:
    """The prediction's top k as payload entries; None when it has none."""
    if pred is None or pred.top_k is None:
        return None
    return [LabelScore(label=label, score=score) for label, score in pred.top_k]


def detections_payload(pred: Prediction | None) -> list[DetectionPayload] | None:
    """The prediction's detections as payload entries; None when it has none."""
    if pred is None or pred.detections is None:
        return None
    return [DetectionPayload(label=d.label, score=d.score, box=d.box) for d in pred.detections]


def item_outcomes(
    pieces: list[Piece], verdicts: list[Verdict], failures: list[ItemFailure]
) -> dict[str, ItemOutcome]:
    """The manifest's per-item outcome: the most anomalous piece, or the error."""
    outcomes: dict[str, ItemOutcome] = {}
    for p, v in zip(pieces, verdicts, strict=True):
        outcomes[p.item.id] = _worst(outcomes.get(p.item.id), v)
    for f in failures:
        outcomes[f.item.id] = ItemOutcome(error=f.error_type)
    return outcomes


def _count(counts: dict[str, int], pred: Prediction | None, modality: str) -> None:
    """Add one piece: its detections per class (detectors), else its label (or modality)."""
    if pred is not None and pred.detections is not None:
        for d in pred.detections:
            counts[d.label] = counts.get(d.label, 0) + 1
        return
    key = pred.label if pred and pred.label is not None else modality
    counts[key] = counts.get(key, 0) + 1


def count_pieces(
    pieces: list[Piece], verdicts: list[Verdict], failures: list[ItemFailure]
) -> tuple[dict[str, int], dict[str, dict[str, int]] | None]:
    """Pieces per label, and the counts of each model when a piece had several (else None).

    Unlabelled pieces count per modality, a detector's detections per class; ``error``
    counts the failed items.
    """
    counts: dict[str, int] = {}
    per_model: dict[str, dict[str, int]] = {}
    for p, v in zip(pieces, verdicts, strict=True):
        _count(counts, v.pred, p.modality)
        for name, (_, pred) in v.by_model.items():
            _count(per_model.setdefault(name, {}), pred, p.modality)
    if failures:
        counts["error"] = len(failures)
    several = any(len(v.by_model) > 1 for v in verdicts)
    return counts, (per_model if several else None)


def _worst(prev: ItemOutcome | None, v: Verdict) -> ItemOutcome:
    """Per-item outcome for the manifest; for segmented series keep the most anomalous."""
    pred = v.pred
    cur = ItemOutcome(
        label=pred.label if pred else None,
        score=pred.score if pred else None,
        anomaly=v.anomaly,
        anomaly_score=pred.anomaly_score if pred else None,
    )
    if prev is None:
        return cur
    if (cur.anomaly, cur.anomaly_score or 0.0) > (prev.anomaly, prev.anomaly_score or 0.0):
        return cur
    return prev


__all__ = [
    "ItemFailure",
    "Verdict",
    "count_pieces",
    "detections_payload",
    "item_outcomes",
    "item_results",
    "model_verdicts",
    "top_k_payload",
    "verdict",
]
