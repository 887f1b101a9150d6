"""The replay's before/after picture: the deployed model's verdicts against the replayed one's.

``was``: what the deployed model said when a window was retained; against it, what the
replayed model says now.

Left: label transitions (rows: before, columns: after; off the diagonal: changed). Right:
anomaly scores before against after, one point per item (red: the anomaly flag changed),
the first ``MAX_POINTS`` items. A panel without data is left out; without any (only first
verdicts, or failures) no picture is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cdml_edge import charts
from cdml_edge.fsio import staged_path
from cdml_edge.retrain.replay import is_first_verdict

MAX_POINTS = 20_000


@dataclass
class Comparison:
    """Accumulates result records (:func:`~cdml_edge.retrain.replay.result_records`)."""

    labels: Counter[tuple[str, str]] = field(default_factory=Counter)
    points: list[tuple[float, float, bool]] = field(default_factory=list)
    models: tuple[str, str] | None = None

    def add(self, doc: Mapping[str, Any]) -> None:
        """One record; failures, first verdicts and items never scored are left out."""
        was = doc.get("was")
        if was is None or "error" in doc or is_first_verdict(doc):
            return
        if self.models is None:
            self.models = (_model(was), _model(doc))
        if was.get("label") is not None and doc.get("label") is not None:
            self.labels[(str(was["label"]), str(doc["label"]))] += 1
        before, after = was.get("anomaly_score"), doc.get("anomaly_score")
        if before is not None and after is not None and len(self.points) < MAX_POINTS:
            flipped = bool(was.get("anomaly")) != bool(doc.get("anomaly"))
            self.points.append((float(before), float(after), flipped))

    @property
    def empty(self) -> bool:
        """Whether there is nothing to draw: no label pair and no score point."""
        return not self.labels and not self.points

    def write(self, path: Path) -> Path | None:
        """Write the picture at ``path`` (PNG) and return its path.

        ``None`` when there is nothing to compare or no matplotlib.
        """
        if self.empty or not charts.available():
            return None
        panels = int(bool(self.labels)) + int(bool(self.points))
        fig, axes = charts.figure(panels, width=5.5, height=5.0)
        before, after = self.models or ("before", "after")
        if self.labels:
            self._labels(axes.pop(0), before, after)
        if self.points:
            self._scores(axes.pop(0), before, after)
        fig.suptitle(f"replay: {before} (before) -> {after} (after)")
        with staged_path(path) as staged:  # a user's output: the mode the umask gives
            charts.save(fig, staged)
        return path

    def _labels(self, ax: Any, before: str, after: str) -> None:
        rows = sorted({b for b, _ in self.labels})
        cols = sorted({a for _, a in self.labels})
        counts = np.zeros((len(rows), len(cols)), dtype=np.int64)
        for (b, a), n in self.labels.items():
            counts[rows.index(b), cols.index(a)] = n
        changed = sum(n for (b, a), n in self.labels.items() if a != b)
        charts.matrix(
            ax,
            counts,
            rows,
            cols,
            f"labels: {changed} of {counts.sum()} changed",
            f"before ({before})",
            f"after ({after})",
        )

    def _scores(self, ax: Any, before: str, after: str) -> None:
        pts = np.array([(b, a) for b, a, _ in self.points])
        flipped = np.array([f for _, _, f in self.points])
        lo, hi = float(pts.min()), float(pts.max())
        ax.plot([lo, hi], [lo, hi], color="#999", linewidth=1)
        ax.scatter(pts[~flipped, 0], pts[~flipped, 1], s=8, color="#3563c9", label="same flag")
        if flipped.any():
            ax.scatter(
                pts[flipped, 0],
                pts[flipped, 1],
                s=14,
                color="#c62828",
                label="anomaly flag changed",
            )
        ax.set_title(f"anomaly scores: {int(flipped.sum())} of {len(pts)} flags changed")
        ax.set_xlabel(f"before ({before})")
        ax.set_ylabel(f"after ({after})")
        ax.grid(alpha=0.3)
        ax.legend()


def _model(doc: Mapping[str, Any]) -> str:
    name, version = doc.get("model") or "none", doc.get("model_version")
    return f"{name} {version}" if version else str(name)


def comparison_path(out: Path) -> Path:
    """Where the picture of a replay into ``out`` goes: beside it, ``.png``."""
    return out.with_suffix(".png")
