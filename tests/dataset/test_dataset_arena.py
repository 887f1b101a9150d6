"""CDMLStreamDataset batches read into a reused arena when there is no cache to fill."""

from __future__ import annotations

import pickle
from pathlib import Path

from helpers.dataset_data import class_images, write


def test_batches_through_the_arena_equal_single_items(tmp_path: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    path = write(tmp_path / "pets.zip", class_images(per_class=20, size=(96, 64)))
    ds = CDMLStreamDataset(path, is_image=True, target_size=40, labels="folder", cache_size_mb=0)
    batches = [list(range(0, 25)), list(range(30, 60)), [59, 0, 31, 7]]
    for idx in batches:
        got = ds.__getitems__(idx)
        for i, (x, y) in zip(idx, got, strict=True):
            x1, y1 = ds[i]
            assert torch.equal(x, x1) and y == y1
    arena = ds._arenas.arena
    assert arena.batches == len(batches) and 0 < arena.capacity <= 64 << 20
    clone = pickle.loads(pickle.dumps(ds))  # the arena stays behind
    assert not hasattr(clone._arenas, "arena")
    assert torch.equal(clone.__getitems__([3])[0][0], ds[3][0])


def test_cached_and_raw_datasets_keep_bytes(tmp_path: Path) -> None:
    """With a cache (the default) or raw-bytes items, no arena: items must outlive the batch."""
    from cdml_edge import CDMLStreamDataset

    path = write(tmp_path / "pets.zip", class_images(per_class=3))
    raw = CDMLStreamDataset(path, cache_size_mb=0)
    items = raw.__getitems__([0, 1, 2])
    assert all(type(b) is bytes for b in items)
    assert items == [raw[0], raw[1], raw[2]]
    cached = CDMLStreamDataset(path, is_image=True, target_size=16)
    cached.__getitems__([0, 1])
    assert not hasattr(cached._arenas, "arena")


def test_dataloader_workers_with_the_arena(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    path = write(tmp_path / "pets.zip", class_images(per_class=16, size=(64, 48)))
    ds = CDMLStreamDataset(path, is_image=True, target_size=32, labels="folder", cache_size_mb=0)
    loader = DataLoader(ds, batch_size=8, num_workers=2, shuffle=False)
    xs = torch.cat([x for x, _ in loader])
    assert xs.shape == (len(ds), 3, 32, 32)
    assert torch.equal(xs[5], ds[5][0]) and torch.equal(xs[-1], ds[len(ds) - 1][0])
