"""How a model's outputs become a verdict per item: one head per kind of output.

:class:`SpecHead` reads our own models (``logits`` / ``anomaly`` outputs, as their metadata
says); :class:`ClassifierHead`, :class:`AnomalyScoreHead`, :class:`EmbeddingHead` and
:class:`DetectorHead` read any model described in the configuration (``models.<name>.output``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cdml_edge.model.detect import Detection, RawDetections, decode_boxes, decode_yolo
from cdml_edge.model.prepare import Geometry


@dataclass(frozen=True)
class Prediction:
    """What a model says about one item."""

    label: str | None
    score: float | None
    anomaly: bool
    anomaly_score: float | None
    top_k: tuple[tuple[str, float], ...] | None = None
    detections: tuple[Detection, ...] | None = None


Geometries = Sequence[Geometry | None]


class Head:
    """Reads the outputs named in :attr:`outputs` for a batch of ``n`` items."""

    kind = "none"
    outputs: list[str]

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """One prediction per item from the outputs ``out`` of a batch of ``n`` items.

        ``geometry``: per item, where the input's pixels came from (detectors use it).
        """
        raise NotImplementedError


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax of each row of ``x`` (``(N, classes)``).

    A row holding ``inf`` or ``nan`` comes out ``nan``, quietly: the score that is not
    finite is what refuses the item, not a numpy warning.
    """
    with np.errstate(invalid="ignore"):
        z = x - x.max(axis=1, keepdims=True)
        p = np.exp(z)
        return np.asarray(p / p.sum(axis=1, keepdims=True))


def _name(labels: Sequence[str], k: int) -> str:
    return labels[k] if k < len(labels) else str(k)


@dataclass
class SpecHead(Head):
    """Our models: softmax over ``logits``, and ``anomaly`` against the threshold."""

    outputs: list[str]
    labels: list[str]
    threshold: float | None
    kind = "spec"

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """Softmax of ``logits`` as label and score; ``anomaly`` against the threshold.

        Without ``logits``, the anomaly score is the score and ``anomaly`` / ``normal`` the label.
        """
        labels: list[str | None] = [None] * n
        scores: list[float | None] = [None] * n
        if "logits" in out:
            p = softmax(np.asarray(out["logits"], dtype=np.float64).reshape(n, -1))
            idx = p.argmax(axis=1)
            for i in range(n):
                k = int(idx[i])
                labels[i] = _name(self.labels, k)
                scores[i] = float(p[i, k])
        anomaly = [False] * n
        a_scores: list[float | None] = [None] * n
        if "anomaly" in out and self.threshold is not None:
            a = np.asarray(out["anomaly"], dtype=np.float64).reshape(n, -1)[:, 0]
            flags = a > self.threshold
            for i in range(n):
                a_scores[i] = float(a[i])
                anomaly[i] = bool(flags[i])
                if "logits" not in out:
                    labels[i] = "anomaly" if flags[i] else "normal"
                    scores[i] = float(a[i])
        return [Prediction(labels[i], scores[i], anomaly[i], a_scores[i]) for i in range(n)]


@dataclass
class ClassifierHead(Head):
    """Logits or probabilities ``(N, classes)``: the best label, its probability, the top k."""

    output: str
    labels: list[str]
    probabilities: bool | None = None  # None: detected per batch
    top_k: int = 1
    kind = "classifier"

    @property
    def outputs(self) -> list[str]:  # type: ignore[override]
        """The one output read."""
        return [self.output]

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """The best label and its probability per item, and the top k with ``top_k > 1``.

        Softmax first, unless the output holds probabilities (``probabilities``, or detected).
        """
        x = np.asarray(out[self.output], dtype=np.float64).reshape(n, -1)
        p = x if self._is_probabilities(x) else softmax(x)
        k = min(self.top_k, p.shape[1])
        order = np.argsort(-p, axis=1, kind="stable")[:, :k]
        preds = []
        for i in range(n):
            best = [(_name(self.labels, int(j)), float(p[i, j])) for j in order[i]]
            top = tuple(best) if self.top_k > 1 else None
            preds.append(Prediction(best[0][0], best[0][1], False, None, top_k=top))
        return preds

    def _is_probabilities(self, x: np.ndarray) -> bool:
        if self.probabilities is not None:
            return self.probabilities
        sums = x.sum(axis=1)
        return bool(x.min() >= 0 and x.max() <= 1 and np.allclose(sums, 1.0, atol=1e-3))


@dataclass
class AnomalyScoreHead(Head):
    """One score per item (the first value of its row) against the threshold.

    Above it is an anomaly (below it, with ``below``: scikit-learn's outlier scores).
    """

    output: str
    threshold: float | None
    below: bool = False
    kind = "anomaly"

    @property
    def outputs(self) -> list[str]:  # type: ignore[override]
        """The one output read."""
        return [self.output]

    def scores(self, out: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        """The raw score of each item."""
        return np.asarray(out[self.output], dtype=np.float64).reshape(n, -1)[:, 0]

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """``anomaly`` or ``normal`` per item, with its score (scores only without a threshold)."""
        a = self.scores(out, n)
        preds = []
        for v in a:
            if self.threshold is None:  # not calibrated yet: scores only
                preds.append(Prediction(None, float(v), False, float(v)))
                continue
            flag = bool(v < self.threshold if self.below else v > self.threshold)
            preds.append(Prediction("anomaly" if flag else "normal", float(v), flag, float(v)))
        return preds


@dataclass
class EmbeddingHead(Head):
    """A vector per item, scored against one prototype per label.

    A prototype is the mean vector of the label's examples. The verdict: the nearest label,
    the distance to it, and an anomaly when the distance is beyond that label's threshold.
    """

    output: str
    examples: dict[str, Path] = field(default_factory=dict)  # label -> folder of examples
    percentile: float = 99.0
    labels: list[str] = field(default_factory=list)
    prototypes: np.ndarray | None = None  # (labels, D)
    thresholds: np.ndarray | None = None  # (labels,)
    kind = "embedding"

    @property
    def outputs(self) -> list[str]:  # type: ignore[override]
        """The one output read."""
        return [self.output]

    def vectors(self, out: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        """The vector of each item, ``(n, dim)``."""
        return np.asarray(out[self.output], dtype=np.float64).reshape(n, -1)

    def fit(self, vectors: Mapping[str, np.ndarray], percentile: float) -> None:
        """Prototypes and thresholds from example vectors per label."""
        self.labels = list(vectors)
        self.prototypes = np.stack([np.asarray(v).mean(axis=0) for v in vectors.values()])
        self.thresholds = np.array(
            [
                float(np.percentile(_distances(np.asarray(v), p[None, :])[:, 0], percentile))
                for v, p in zip(vectors.values(), self.prototypes, strict=True)
            ]
        )

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """The nearest prototype's label and the distance to it; beyond its threshold: anomaly.

        Raises ``ValueError`` when there are no prototypes yet.
        """
        if self.prototypes is None or self.thresholds is None:
            raise ValueError("embedding model without prototypes (its examples were not read)")
        d = _distances(self.vectors(out, n), self.prototypes)
        nearest = d.argmin(axis=1)
        preds = []
        for i, k in enumerate(nearest):
            dist = float(d[i, k])
            flag = bool(dist > self.thresholds[k])
            preds.append(Prediction(self.labels[k], dist, flag, dist))
        return preds


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances ``(len(a), len(b))`` (as ``torch.cdist`` in ``nn.cda``)."""
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.asarray(np.sqrt(np.maximum(sq, 0.0)))


@dataclass
class DetectorHead(Head):
    """Boxes, scores and classes; detections in source pixels, the best one as the label."""

    labels: list[str]
    format: str = "yolo"
    output: str = ""
    ssd: tuple[str, str, str] = ("boxes", "scores", "classes")
    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 100
    objectness: bool | None = None
    yxyx: bool = False
    normalized: bool = False
    input_size: tuple[int, int] = (640, 640)  # width, height: scale of normalised boxes
    kind = "detector"

    @property
    def outputs(self) -> list[str]:  # type: ignore[override]
        """The YOLO output, or the three SSD outputs (boxes, scores, classes)."""
        return [self.output] if self.format == "yolo" else list(self.ssd)

    def raw(self, out: Mapping[str, np.ndarray], i: int) -> RawDetections:
        """Item ``i``'s detections in input pixels."""
        if self.format == "yolo":
            return decode_yolo(
                out[self.output][i],
                len(self.labels),
                self.score_threshold,
                self.iou_threshold,
                self.max_detections,
                self.objectness,
            )
        b, s, c = (out[name][i] for name in self.ssd)
        scale = self.input_size if self.normalized else (1.0, 1.0)
        return decode_boxes(
            b,
            s,
            c,
            self.score_threshold,
            self.max_detections,
            yxyx=self.yxyx,
            scale=(float(scale[0]), float(scale[1])),
        )

    def interpret(
        self, out: Mapping[str, np.ndarray], n: int, geometry: Geometries
    ) -> list[Prediction]:
        """Detections per item in source pixels; the first one gives the label and score."""
        preds = []
        for i in range(n):
            raw = self.raw(out, i)
            g = geometry[i] if i < len(geometry) else None
            boxes = g.to_source(raw.boxes) if g is not None else raw.boxes.reshape(-1, 4)
            dets = tuple(
                Detection(
                    _name(self.labels, int(c)),
                    round(float(s), 6),
                    tuple(round(float(v), 2) for v in box),  # type: ignore[arg-type]
                )
                for box, s, c in zip(boxes, raw.scores, raw.classes, strict=True)
            )
            best = dets[0] if dets else None
            preds.append(
                Prediction(
                    best.label if best else None,
                    best.score if best else None,
                    False,
                    None,
                    detections=dets,
                )
            )
        return preds


__all__ = [
    "AnomalyScoreHead",
    "ClassifierHead",
    "DetectorHead",
    "EmbeddingHead",
    "Head",
    "Prediction",
    "SpecHead",
    "softmax",
]
