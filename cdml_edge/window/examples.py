"""Embedding models: prototypes and thresholds from folders of example inputs, in numpy.

``models.<name>.output.examples`` maps a label to a folder. Each example is decoded and
prepared as a window member would be, the model gives its vector, and a label's prototype
is the mean vector of its examples (as :func:`cdml_edge.nn.cda.prototypes`, without torch);
its threshold is the configured percentile of its examples' distances to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from cdml_edge.errors import CdmlError
from cdml_edge.modality import items_for, modality_for
from cdml_edge.model.heads import EmbeddingHead
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.inputs import MODEL_INPUTS
from cdml_edge.window.pieces import decode_input

BATCH = 32
MAX_EXAMPLES = 2000  # per label: the first files by name


class ExamplesError(CdmlError, ValueError):
    """An example folder that cannot give prototypes; names the folder or file."""


def example_files(folder: Path, modality: str) -> list[Path]:
    """The files of ``folder`` of ``modality`` (csv and timeseries take each other), by name."""
    if not folder.is_dir():
        raise ExamplesError(f"{folder}: example folder not found")
    kinds = items_for(modality)
    files = sorted(p for p in folder.iterdir() if p.is_file() and modality_for(p.name) in kinds)
    if not files:
        raise ExamplesError(f"{folder}: no {modality} file among the examples")
    return files[:MAX_EXAMPLES]


def prepared_examples(runner: ModelRunner, files: list[Path]) -> list[np.ndarray]:
    """Each file decoded and prepared for ``runner`` as a window member would be."""
    entry = MODEL_INPUTS[runner.modality]
    want = decode_input(runner)
    prepared = []
    for f in files:
        try:
            decoded = entry.decode(f.read_bytes(), f.name, want)
            if decoded is None:
                raise ValueError("nothing to score")
            prepared.append(runner.prepare(decoded))
        except (OSError, ValueError) as exc:
            raise ExamplesError(f"{f}: example cannot be read: {exc}") from exc
    return prepared


def example_vectors(runner: ModelRunner, files: list[Path]) -> np.ndarray:
    """The model's output vector of each file ``(len(files), D)``."""
    head = runner.head
    if not isinstance(head, EmbeddingHead):
        raise ExamplesError(f"model {runner.name} is a {runner.kind} model, not an embedding")
    prepared = prepared_examples(runner, files)
    parts = [
        head.vectors(runner.raw(np.stack(prepared[i : i + BATCH])), len(prepared[i : i + BATCH]))
        for i in range(0, len(prepared), BATCH)
    ]
    return np.concatenate(parts)


def fit_examples(runners: Mapping[str, ModelRunner]) -> None:
    """Give every embedding model among ``runners`` its prototypes (once)."""
    for runner in runners.values():
        head = runner.head
        if not isinstance(head, EmbeddingHead) or head.prototypes is not None:
            continue
        vectors = {
            label: example_vectors(runner, example_files(folder, runner.modality))
            for label, folder in head.examples.items()
        }
        head.fit(vectors, head.percentile)


__all__ = ["ExamplesError", "example_files", "example_vectors", "fit_examples", "prepared_examples"]
