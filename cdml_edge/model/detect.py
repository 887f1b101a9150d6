"""Detector outputs -> detections, for YOLOv5/v8 and SSD-style exports.

YOLOv5/v8 single tensors (with NMS here, in numpy) and the boxes / scores / classes outputs
of SSD-style exports.

Boxes come out in the model input's pixels as ``x1, y1, x2, y2``; the runner maps them to the
source image with the item's :class:`~cdml_edge.model.prepare.Geometry`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Detection:
    """One object: its label, score and box ``(x1, y1, x2, y2)`` in source pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class RawDetections:
    """One item's detections before labels and source coordinates.

    ``(K, 4)`` boxes in input pixels, ``(K,)`` scores and class indices.
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


def yolo_rows(out: np.ndarray, n_classes: int) -> np.ndarray:
    """One item's YOLO output as ``(boxes, 4 [+1] + classes)`` rows.

    YOLOv8 exports it transposed, ``(4 + classes, boxes)``.
    """
    a = np.asarray(out, dtype=np.float32)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2:
        raise ValueError(f"a YOLO output is (boxes, 4+classes) per item, got shape {a.shape}")
    widths = (4 + n_classes, 5 + n_classes)
    if a.shape[1] not in widths and a.shape[0] in widths:
        a = a.T
    if a.shape[1] not in widths:
        raise ValueError(
            f"a YOLO output row has 4 (+1 objectness) + {n_classes} classes = {widths[0]} or "
            f"{widths[1]} values; this one has {a.shape[1]} (do the labels match the model?)"
        )
    return a


def decode_yolo(
    out: np.ndarray,
    n_classes: int,
    score_threshold: float,
    iou_threshold: float,
    max_detections: int,
    objectness: bool | None = None,
) -> RawDetections:
    """One item's YOLO tensor -> detections after the score threshold and class-wise NMS.

    Rows are ``cx, cy, w, h`` then, for YOLOv5, an objectness score (the class scores are
    multiplied by it), then one score per class.
    """
    rows = yolo_rows(out, n_classes)
    has_obj = rows.shape[1] == 5 + n_classes if objectness is None else objectness
    cls_scores = rows[:, 5:] * rows[:, 4:5] if has_obj else rows[:, 4:]
    classes = cls_scores.argmax(axis=1)
    scores = cls_scores[np.arange(rows.shape[0]), classes]
    keep = scores >= score_threshold
    cx, cy, w, h = (rows[keep, i] for i in range(4))
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    picked = nms(boxes, scores[keep], classes[keep], iou_threshold, max_detections)
    return RawDetections(boxes[picked], scores[keep][picked], classes[keep][picked])


def decode_boxes(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    score_threshold: float,
    max_detections: int,
    *,
    yxyx: bool = False,
    scale: tuple[float, float] = (1.0, 1.0),
) -> RawDetections:
    """One item's SSD-style outputs -> detections above the score threshold.

    The outputs are already suppressed by the model; ``yxyx`` corner order and ``scale``
    (input width, height for normalised boxes) as the export has them.
    """
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if yxyx:
        b = b[:, [1, 0, 3, 2]]
    b = b * np.array([scale[0], scale[1], scale[0], scale[1]])
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    c = np.asarray(classes).reshape(-1).astype(np.int64)
    if not len(b) == len(s) == len(c):
        raise ValueError(f"boxes/scores/classes differ in length: {len(b)}/{len(s)}/{len(c)}")
    order = np.argsort(-s, kind="stable")
    order = order[s[order] >= score_threshold][:max_detections]
    return RawDetections(b[order], s[order], c[order])


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    iou: float,
    max_keep: int | None = None,
) -> np.ndarray:
    """Indices kept by greedy class-wise non-maximum suppression, best score first.

    A box is dropped when it overlaps a better box of its class by more than ``iou``; it
    stops once ``max_keep`` boxes are kept.
    """
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    b = np.asarray(boxes, dtype=np.float64)
    # class-wise in one pass: boxes of different classes are moved apart so they never overlap
    offset = classes.astype(np.float64)[:, None] * (np.abs(b).max() + 1.0) * 2.0
    b = b + offset
    area = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    order = np.argsort(-np.asarray(scores), kind="stable")
    keep: list[int] = []
    while order.size and (max_keep is None or len(keep) < max_keep):
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        xx1 = np.maximum(b[i, 0], b[rest, 0])
        yy1 = np.maximum(b[i, 1], b[rest, 1])
        xx2 = np.minimum(b[i, 2], b[rest, 2])
        yy2 = np.minimum(b[i, 3], b[rest, 3])
        inter = np.maximum(xx2 - xx1, 0) * np.maximum(yy2 - yy1, 0)
        union = area[i] + area[rest] - inter
        overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[overlap <= iou]
    return np.asarray(keep, dtype=np.int64)


__all__ = ["Detection", "RawDetections", "decode_boxes", "decode_yolo", "nms", "yolo_rows"]
