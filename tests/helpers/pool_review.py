"""What the hostile reviews of the batch pool share: their images, loaders and fixtures."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset

POOL = pytest.mark.parametrize("pool_mib", ["256", "0"], ids=["pool", "no-pool"])


def dataset(pets: Path, **kw: object) -> CDMLStreamDataset:
    """The reviews' dataset: 20×14 uint8 images, batched into one buffer."""
    return CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8", **kw)


def shuffled(pets: Path, **kw: Any) -> DataLoader:
    """One persistent worker, batches of 2, a fixed shuffle (``kw``: more loader options)."""
    g = torch.Generator().manual_seed(0)
    ds = dataset(pets)
    return DataLoader(
        ds, batch_size=2, num_workers=1, persistent_workers=True, shuffle=True, generator=g, **kw
    )


def kept_with_views(pets: Path) -> tuple[list[torch.Tensor], list[Any], list[Any]]:
    """An epoch of one worker's batches, kept; a NumPy view of each, and a copy of each."""
    kept = list(DataLoader(dataset(pets), batch_size=2, num_workers=1))
    views = [x.numpy() for x in kept]
    return kept, views, [v.copy() for v in views]


def epochs(loader: DataLoader, n: int) -> None:
    """Run ``n`` epochs, dropping every batch."""
    for _ in range(n):
        for _x in loader:
            pass


def wait_for_file(path: Path, seconds: float = 30) -> None:
    """Poll until ``path`` exists or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def fork_each_epoch(loader: DataLoader, n: int) -> None:
    """``n`` epochs, forking a child that ends at once while the first batch is held."""
    for _ in range(n):
        for k, _x in enumerate(loader):
            if k == 0:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
