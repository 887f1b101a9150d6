"""Pictures of a training run, written beside its ``metrics.jsonl``.

``training.png`` (loss and accuracy per epoch, training and validation) and ``confusion.png``
(validation labels against predictions, a class name longer than :data:`TICK_CHARS` cut
with an ellipsis; the counts and the whole names also in ``confusion.json``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cdml_edge import charts
from cdml_edge.fsio import atomic_write
from cdml_edge.nn.train import CDMLTrainer, _split

log = logging.getLogger(__name__)

CURVES_PNG = "training.png"
CONFUSION_PNG = "confusion.png"
CONFUSION_JSON = "confusion.json"


TICK_CHARS = 24
"""Longest class name drawn whole on the confusion picture (``confusion.json`` keeps all)."""


def tick_label(name: str, limit: int = TICK_CHARS) -> str:
    """``name`` as drawn on an axis: cut to ``limit`` characters with an ellipsis.

    A long class name would otherwise squeeze the matrix to nothing.
    """
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


@torch.no_grad()
def confusion_matrix(trainer: CDMLTrainer, loader: Iterable[Any], n_classes: int) -> np.ndarray:
    """Counts of (true label, predicted label) over ``loader``; rows are the true labels."""
    counts = np.zeros((n_classes, n_classes), dtype=np.int64)
    trainer.model.eval()
    for batch in loader:
        x, y = _split(batch)
        if y is None:
            continue
        out = trainer.model.outputs(x.to(trainer.device))
        if "logits" not in out:
            continue
        pred = out["logits"].argmax(1).cpu().numpy()
        np.add.at(counts, (y.cpu().numpy(), pred), 1)
    return counts


def write_training_plots(
    out_dir: Path,
    history: Sequence[dict[str, Any]],
    classes: Sequence[str],
    confusion: np.ndarray | None,
) -> list[Path]:
    """Write the run's pictures (see the module); their paths, none without matplotlib (warned)."""
    if not charts.available():
        log.warning("training plots skipped: pip install 'cdml-edge[plots]'")
        return []
    written = []
    if history:
        epochs = [float(r["epoch"]) for r in history]
        fig, (loss_ax, acc_ax) = charts.figure(2)
        charts.curves(
            loss_ax,
            epochs,
            {
                "train": [r.get("train_loss") for r in history],
                "validation": [r.get("val_loss") for r in history],
            },
            "loss",
            "loss",
        )
        charts.curves(
            acc_ax,
            epochs,
            {
                "train": [r.get("train_acc") for r in history],
                "validation": [r.get("val_acc") for r in history],
            },
            "accuracy",
            "accuracy",
        )
        written.append(charts.save(fig, out_dir / CURVES_PNG))
    if confusion is not None and confusion.sum() > 0:
        total = int(confusion.sum())
        acc = float(np.trace(confusion)) / total
        side = max(4.0, 0.6 * len(classes) + 2)
        fig, (ax,) = charts.figure(1, width=side, height=side)
        ticks = [tick_label(c) for c in classes]
        charts.matrix(
            ax,
            confusion,
            ticks,
            ticks,
            f"validation: {total} items, accuracy {acc:.1%}",
            "true",
            "predicted",
        )
        written.append(charts.save(fig, out_dir / CONFUSION_PNG))
        doc = {
            "labels": list(classes),
            "matrix": confusion.tolist(),
            "rows": "true",
            "columns": "predicted",
        }
        atomic_write(out_dir / CONFUSION_JSON, (json.dumps(doc) + "\n").encode())
    return written
