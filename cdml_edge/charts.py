"""PNG charts for people: training curves, confusion matrices, replay comparisons.

Drawn with matplotlib's Agg canvas: no display, no pyplot global state, safe in any thread.

matplotlib comes with the ``plots`` extra (``train`` includes it); :func:`available` says
whether it is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cdml_edge.fsio import atomic_write

DPI = 110


def available() -> bool:
    """Whether matplotlib is installed (``pip install 'cdml-edge[plots]'``)."""
    return importlib.util.find_spec("matplotlib") is not None


def figure(ncols: int, width: float = 5.0, height: float = 4.0) -> tuple[Any, list[Any]]:
    """A figure of ``ncols`` axes side by side, and the axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (atomically)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write(path, buf.getvalue())
    return path


def curves(
    ax: Any, x: Sequence[float], series: dict[str, Sequence[float | None]], title: str, ylabel: str
) -> None:
    """Lines of ``series`` over ``x`` (``None`` values left out), with a legend."""
    for name, ys in series.items():
        pts = [(a, b) for a, b in zip(x, ys, strict=True) if b is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", markersize=3, label=name)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend()


def matrix(
    ax: Any,
    counts: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    ylabel: str,
    xlabel: str,
) -> None:
    """A count matrix as a heat map, each cell annotated with its count."""
    ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(1, int(counts.max())))
    ax.set_xticks(range(len(cols)), [str(c) for c in cols], rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    top = counts.max() or 1
    for (i, j), v in np.ndenumerate(counts):
        ax.text(
            j,
            i,
            str(int(v)),
            ha="center",
            va="center",
            color="white" if v > top / 2 else "black",
            fontsize=9,
        )
