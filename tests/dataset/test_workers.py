"""Process safety: fork and spawn DataLoader workers, and DDP over two gloo processes.

The workers also after the parent read items; DDP with DistributedSampler, on the CPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.dataset_data import class_images, write

from cdml_edge.decode import DecodeError


@pytest.fixture(scope="module", params=["zip", "tar.zst"])
def archive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("w") / f"pets.{request.param}", class_images(6))


# spawn re-imports torch in each worker (seconds), and its unpickle-and-reopen path does not
# depend on the format, so it runs once, over the stateful tar.zst decompressor
@pytest.mark.parametrize(
    ("fmt", "context"), [("zip", "fork"), ("tar.zst", "fork"), ("tar.zst", "spawn")]
)
def test_workers_after_parent_read(tmp_path: Path, fmt: str, context: str) -> None:
    import torch
    from helpers.worker_probe import Probe
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    archive = write(tmp_path / f"pets.{fmt}", class_images(4))
    ds = CDMLStreamDataset(archive, is_image=True, target_size=12, labels="folder")
    expected = [ds[i] for i in range(len(ds))]  # the parent opens the archive and reads first
    assert ds._pid == os.getpid() and ds.cache_info().items == len(ds)
    loader = DataLoader(
        Probe(ds),
        batch_size=4,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=False,
    )
    xs, ys, pids, opened = [], [], [], []
    for x, y, pid, opened_pid in loader:
        xs.append(x)
        ys.extend(y.tolist())
        pids.extend(pid.tolist())
        opened.extend(opened_pid.tolist())
    assert ys == [y for _, y in expected]
    torch.testing.assert_close(torch.cat(xs), torch.stack([x for x, _ in expected]))
    assert os.getpid() not in pids and len(set(pids)) == 2
    assert opened == pids  # every worker reopened the archive in its own process
    assert ds._pid == os.getpid() and ds[0][1] == expected[0][1]  # parent still works


def test_default_collate_raw_bytes_in_workers(archive: Path) -> None:
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(archive, labels="folder")
    ds[3]
    got = [b for xs, _ in DataLoader(ds, batch_size=5, num_workers=2) for b in xs]
    assert got == [ds[i][0] for i in range(len(ds))]


def _ddp_worker(rank: int, world: int, path: str, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from cdml_edge import CDMLStreamDataset

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        ds = CDMLStreamDataset(path, is_image=True, target_size=8, labels="folder")
        sampler = DistributedSampler(ds, shuffle=True, seed=5)
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=1)
        labels: list[int] = []
        sums: list[float] = []
        for x, y in loader:
            labels.extend(y.tolist())
            sums.extend(x.sum(dim=(1, 2, 3)).tolist())
        count = torch.tensor([len(labels)])
        dist.all_reduce(count)  # gloo collective over the two ranks
        mine = {
            "indices": list(sampler),
            "labels": labels,
            "sums": sums,
            "shard": ds.shard(rank, world).names,
            "total": int(count),
        }
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_processes_gloo(tmp_path: Path) -> None:
    import torch.multiprocessing as tmp
    from torch.utils.data import DistributedSampler

    from cdml_edge import CDMLStreamDataset

    archive = write(tmp_path / "pets.zip", class_images(6))
    out = tmp_path / "ranks.json"
    tmp.spawn(
        _ddp_worker, args=(2, str(archive), str(tmp_path / "init"), str(out)), nprocs=2, join=True
    )
    ranks = json.loads(out.read_text())
    ds = CDMLStreamDataset(archive, is_image=True, target_size=8, labels="folder")
    seen: list[int] = []
    for rank, got in enumerate(ranks):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=5)
        sampler.set_epoch(2)
        expected = list(sampler)  # same seed and epoch: the same split in any process
        assert got["indices"] == expected
        assert got["labels"] == [ds.targets[i] for i in expected]  # type: ignore[index]
        want = [float(ds[i][0].sum()) for i in expected]
        assert got["sums"] == pytest.approx(want, rel=1e-6)
        assert got["shard"] == ds.shard(rank, 2).names
        assert got["total"] == len(ds)
        seen.extend(expected)
    assert sorted(seen) == list(range(len(ds)))  # disjoint and complete (18 items, 2 ranks)
    assert set(ranks[0]["shard"]).isdisjoint(ranks[1]["shard"])


def test_worker_decode_error_reaches_the_parent(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    good = class_images(1)[0][1]
    path = write(tmp_path / "bad.zip", [("ok.jpg", good), ("cut.jpg", good[:200])])
    loader = DataLoader(CDMLStreamDataset(path, is_image=True), batch_size=2, num_workers=1)
    with pytest.raises(DecodeError, match="cut.jpg"):
        next(iter(loader))
