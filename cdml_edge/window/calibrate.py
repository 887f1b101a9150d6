"""An anomaly model's threshold from a folder of normal samples.

``cdml-edge calibrate`` writes it into the configuration.

Each sample is decoded and prepared as a window member would be, the model scores it, and
the threshold is the chosen percentile of the scores (the mirror percentile for a model whose
low scores are the anomalies): at 99, about one normal sample in a hundred would be flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdml_edge.model.heads import AnomalyScoreHead, SpecHead
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.examples import BATCH, ExamplesError, example_files, prepared_examples


@dataclass(frozen=True)
class Calibration:
    """A fitted threshold and what it was fitted on."""

    threshold: float
    samples: int
    percentile: float
    low: float
    median: float
    high: float

    def line(self, name: str) -> str:
        """The one-line report of the calibration of model ``name`` (what the command prints)."""
        return (
            f"models.{name}.anomaly_threshold = {self.threshold:.6g}: percentile "
            f"{self.percentile:g} of {self.samples} normal samples (scores {self.low:.6g} "
            f"... median {self.median:.6g} ... {self.high:.6g})"
        )


def anomaly_scores(runner: ModelRunner, files: list[Path]) -> np.ndarray:
    """The model's anomaly score of each file."""
    head = runner.head
    if isinstance(head, SpecHead) and "anomaly" in head.outputs:
        output = "anomaly"
    elif isinstance(head, AnomalyScoreHead):
        output = head.output
    else:
        raise ExamplesError(f"model {runner.name} is a {runner.kind} model, not an anomaly scorer")
    prepared = prepared_examples(runner, files)
    parts = []
    for i in range(0, len(prepared), BATCH):
        chunk = np.stack(prepared[i : i + BATCH])
        out = runner.raw(chunk)
        parts.append(np.asarray(out[output], dtype=np.float64).reshape(len(chunk), -1)[:, 0])
    return np.concatenate(parts)


def calibrate(runner: ModelRunner, folder: Path, percentile: float = 99.0) -> Calibration:
    """The threshold at ``percentile`` of the scores of the normal samples in ``folder``."""
    scores = anomaly_scores(runner, example_files(folder, runner.modality))
    below = isinstance(runner.head, AnomalyScoreHead) and runner.head.below
    q = 100.0 - percentile if below else percentile
    return Calibration(
        threshold=float(f"{np.percentile(scores, q):.6g}"),  # the value printed is the one kept
        samples=int(scores.size),
        percentile=percentile,
        low=float(scores.min()),
        median=float(np.median(scores)),
        high=float(scores.max()),
    )


__all__ = ["Calibration", "anomaly_scores", "calibrate"]
