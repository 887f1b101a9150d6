"""Forked DataLoader workers must not deadlock after the parent used OpenCV's thread pool."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import cv2
import numpy as np

from cdml_edge.archive import write_archive


def test_fork_workers_after_parent_used_opencv_threads(tmp_path: Path) -> None:
    import torch

    from cdml_edge.data.dataset import CDMLStreamDataset

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (96, 96, 3), np.uint8) for _ in range(32)]
    items = [(f"a/{i}.png", cv2.imencode(".png", im)[1].tobytes()) for i, im in enumerate(images)]
    path = tmp_path / "imgs.zip"
    write_archive(path, items)
    # The parent process works OpenCV's thread pool hard before the workers are forked.
    for _ in range(10):
        cv2.resize(np.zeros((1500, 1500, 3), np.uint8), (700, 700))
    dataset = CDMLStreamDataset(path, is_image=True, target_size=16)
    assert dataset[0].shape == (3, 16, 16)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=8,
        num_workers=2,
        multiprocessing_context=multiprocessing.get_context("fork"),
        timeout=60,  # a deadlocked worker raises instead of hanging the suite
    )
    batches = list(loader)
    assert sum(len(b) for b in batches) == 32
    assert torch.equal(batches[0][0], dataset[0])
