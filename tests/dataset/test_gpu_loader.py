"""GPULoader on the CPU: batches pass through unchanged; the tensor walk keeps structure.

The CUDA path (pinned memory, side stream, prefetch) is exercised by
``scripts/bench/bench_gpu_loader.py`` on a machine with CUDA, and by the last test here when
CUDA is present.
"""

from __future__ import annotations

from collections import namedtuple

import pytest

Pair = namedtuple("Pair", ["x", "y"])


def test_passes_batches_through_without_cuda() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from cdml_edge import GPULoader

    ds = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    loader = DataLoader(ds, batch_size=4)
    gpu = GPULoader(loader, "cpu")
    assert not gpu.enabled and len(gpu) == 3
    got = list(gpu)
    want = list(loader)
    assert len(got) == 3
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        assert torch.equal(gx, wx) and torch.equal(gy, wy) and gx.device.type == "cpu"


def test_cuda_device_without_cuda_falls_back() -> None:
    import torch

    from cdml_edge import GPULoader

    if torch.cuda.is_available():
        pytest.skip("checks the fallback when CUDA is absent")
    batches = [torch.ones(2), torch.zeros(3)]
    gpu = GPULoader(batches, "cuda")
    assert not gpu.enabled and list(gpu)[1] is batches[1]
    assert GPULoader(batches).device.type == "cpu"


def test_map_tensors_keeps_structure() -> None:
    import torch

    from cdml_edge import GPULoader
    from cdml_edge.data.gpu import map_tensors

    batch = {"img": torch.ones(2, 2), "meta": [Pair(torch.zeros(1), "name"), (torch.ones(1), 3)]}
    out = map_tensors(batch, lambda t: t + 1)
    assert torch.equal(out["img"], torch.full((2, 2), 2.0))
    assert isinstance(out["meta"][0], Pair) and out["meta"][0].y == "name"
    assert torch.equal(out["meta"][0].x, torch.ones(1)) and out["meta"][1][1] == 3
    with pytest.raises(ValueError):
        GPULoader([], "cpu", prefetch=0)


def test_cuda_copies_match() -> None:
    import torch

    from cdml_edge import GPULoader

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    batches = [(torch.randn(8, 3), torch.arange(8)) for _ in range(5)]
    got = list(GPULoader(batches, "cuda", prefetch=2))
    for (gx, gy), (x, y) in zip(got, batches, strict=True):
        assert gx.is_cuda and torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)
