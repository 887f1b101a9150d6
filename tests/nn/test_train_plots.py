"""``cdml-edge train`` writes pictures of the run beside ``metrics.jsonl``.

The loss and accuracy curves and the validation confusion matrix (its counts also as JSON).
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from cdml_edge import synth
from cdml_edge.archive import write_archive
from cdml_edge.cli import app

COLOURS = {"blue": (0, 0, 255), "green": (0, 255, 0), "red": (255, 0, 0)}


def _frames(n: int, seed: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for cls, rgb in COLOURS.items():
        for i in range(n):
            img = np.clip(np.array(rgb) + rng.normal(0, 8, (16, 16, 3)), 0, 255)
            out.append((f"{cls}/{i:03d}.png", synth.encode_png(img.astype(np.uint8))))
    return out


def _png(path: Path) -> np.ndarray:
    img = cv2.imread(str(path))
    assert img is not None, path
    return img


@pytest.mark.slow  # trains a model through the CLI
def test_train_writes_curves_and_a_confusion_matrix(tmp_path: Path) -> None:
    write_archive(tmp_path / "train.zip", _frames(12, 0))
    write_archive(tmp_path / "val.zip", _frames(5, 1))
    run = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--data",
            str(tmp_path / "train.zip"),
            "--val-data",
            str(tmp_path / "val.zip"),
            "--out",
            str(run),
            "--epochs",
            "3",
            "--image-size",
            "16",
            "--batch-size",
            "8",
            "--lr",
            "5e-3",
        ],
    )
    assert res.exit_code == 0, res.output
    final = json.loads(res.stdout.strip().splitlines()[-1])
    assert f"plots: {run / 'training.png'}, {run / 'confusion.png'}" in res.stdout
    curves, confusion = _png(run / "training.png"), _png(run / "confusion.png")
    assert curves.shape[1] > curves.shape[0] and float(curves.std()) > 5  # two panels, drawn
    assert float(confusion.std()) > 5
    doc = json.loads((run / "confusion.json").read_text())
    m = np.array(doc["matrix"])
    assert doc["labels"] == ["blue", "green", "red"] and m.shape == (3, 3)
    assert m.sum(axis=1).tolist() == [5, 5, 5]  # each validation item once, by its true class
    assert np.trace(m) / m.sum() == pytest.approx(final["val_acc"])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    epochs = [json.loads(line)["epoch"] for line in lines]
    assert epochs == [1, 2, 3]
