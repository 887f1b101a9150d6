"""CDMLTrainer: metrics, checkpoints, resume, DDP (gloo, two processes under torchrun)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader, TensorDataset


def blobs(n: int = 256, seed: int = 0) -> TensorDataset:
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[3.0, 0, 0, 0], [0, 3.0, 0, 0], [0, 0, 3.0, 0]])
    x = centres[y] + torch.randn(n, 4, generator=g)
    return TensorDataset(x, y)


def loaders() -> tuple[DataLoader[tuple[torch.Tensor, ...]], DataLoader[tuple[torch.Tensor, ...]]]:
    from torch.utils.data import DataLoader

    return DataLoader(blobs(), batch_size=32), DataLoader(blobs(128, seed=1), batch_size=64)


def test_fit_logs_metrics_and_never_overwrites_checkpoints(tmp_path: Path) -> None:
    import torch

    from cdml_edge.nn import CDMLTrainer, TabularEncoder
    from cdml_edge.nn.checkpoint import load_model

    torch.manual_seed(0)
    model = TabularEncoder(in_features=4, latent_dim=8, num_classes=3)
    trainer = CDMLTrainer(model, lr=1e-2, device="auto", out_dir=tmp_path, keep_all=True)
    assert trainer.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    train, val = loaders()
    history = trainer.fit(train, val, epochs=3)
    lines = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2, 3]
    assert lines[-1]["val_acc"] > 0.9 and lines[-1]["val_items"] == 128
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert history[-1]["val_acc"] == lines[-1]["val_acc"]
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt"))
    assert ckpts == ["epoch-0001.pt", "epoch-0002.pt", "epoch-0003.pt"]
    first = (tmp_path / "checkpoints" / "epoch-0003.pt").read_bytes()
    again = trainer.save_checkpoint()  # same epoch: a new file, the old one untouched
    assert again.name == "epoch-0003.1.pt"
    assert (tmp_path / "checkpoints" / "epoch-0003.pt").read_bytes() == first
    rebuilt, spec, ckpt = load_model(again)
    assert spec is None and ckpt["epoch"] == 3
    x = blobs(8, seed=5).tensors[0]
    model.eval()
    torch.testing.assert_close(rebuilt.outputs(x)["logits"], model.outputs(x)["logits"])


def test_checkpoints_kept_are_the_last_and_the_best(tmp_path: Path) -> None:
    """Every epoch's checkpoint was kept (20 epochs: 20 files, 129 MB)."""
    import torch

    from cdml_edge.nn import CDMLTrainer, TabularEncoder

    torch.manual_seed(0)
    trainer = CDMLTrainer(TabularEncoder(4, 8, 3), lr=1e-2, device="cpu", out_dir=tmp_path)
    records: list[dict] = []
    history = trainer.fit(*loaders(), epochs=4, on_epoch=records.append)
    assert records == history  # one call per epoch, with its record
    best = min(history, key=lambda r: r["val_loss"])["epoch"]
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt"))
    assert names == sorted({f"epoch-{best:04d}.pt", "epoch-0004.pt"})
    assert trainer.best_checkpoint == tmp_path / "checkpoints" / f"epoch-{best:04d}.pt"
    assert trainer.last_checkpoint == tmp_path / "checkpoints" / "epoch-0004.pt"
    # a run that finds a new best moves "best" and deletes the old one
    trainer._best_loss = float("inf")
    again = trainer.save_checkpoint()
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt")) == [again.name]


def test_resume_continues_exactly(tmp_path: Path) -> None:
    import torch

    from cdml_edge.nn import CDMLTrainer, TabularEncoder

    def fresh(out: Path) -> CDMLTrainer:
        torch.manual_seed(0)
        return CDMLTrainer(TabularEncoder(4, 8, 3), lr=1e-2, device="cpu", out_dir=out)

    straight = fresh(tmp_path / "a")
    straight.fit(*loaders(), epochs=2)
    half = fresh(tmp_path / "b")
    half.fit(*loaders(), epochs=1)
    resumed = fresh(tmp_path / "c")
    history = resumed.fit(*loaders(), epochs=2, resume=tmp_path / "b/checkpoints/epoch-0001.pt")
    assert [r["epoch"] for r in history] == [1, 2]
    assert (
        resumed.optimizer.state_dict()["state"][0]["step"]
        == straight.optimizer.state_dict()["state"][0]["step"]
    )
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    lines = (tmp_path / "c/metrics.jsonl").read_text().splitlines()
    written = [json.loads(s)["epoch"] for s in lines]
    assert written == [2]


def test_resume_rejects_other_models_and_garbage(tmp_path: Path) -> None:
    from cdml_edge.nn import CDMLTrainer, TabularEncoder
    from cdml_edge.nn.checkpoint import CheckpointError

    trainer = CDMLTrainer(TabularEncoder(4, 8, 3), device="cpu", out_dir=tmp_path)
    path = trainer.save_checkpoint()
    from cdml_edge.nn import TimeSeriesEncoder

    other = CDMLTrainer(TimeSeriesEncoder(3, 64, 8, 3), device="cpu")
    with pytest.raises(CheckpointError, match="holds a TabularEncoder"):
        other.load_checkpoint(path)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt"):
        other.load_checkpoint(junk)


WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from cdml_edge.nn import CDMLTrainer, TabularEncoder, init_distributed

    out = sys.argv[1]
    assert init_distributed()  # joins the gloo group torchrun describes (samplers need it)
    torch.manual_seed(int(os.environ["RANK"]))  # different init per rank: DDP must sync it
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (240,), generator=g)
    x = torch.nn.functional.one_hot(y, 4).float() * 3 + torch.randn(240, 4, generator=g)
    ds = TensorDataset(x, y)
    train = DataLoader(ds, batch_size=20, sampler=DistributedSampler(ds, shuffle=True, seed=0))
    val = DataLoader(ds, batch_size=60, sampler=DistributedSampler(ds, shuffle=False))
    trainer = CDMLTrainer(TabularEncoder(4, 8, 3), lr=1e-2, device="cpu", out_dir=out)
    hist = trainer.fit(train, val, epochs=2)
    flat = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    with open(os.path.join(out, f"rank{trainer.rank}.json"), "w") as f:
        json.dump({"world": trainer.world_size, "distributed": trainer.distributed,
                   "params": flat.tolist(), "history": hist}, f)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_ddp_gloo_two_processes_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "run"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(script),
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0 = json.loads((out / "rank0.json").read_text())
    r1 = json.loads((out / "rank1.json").read_text())
    assert r0["distributed"] and r0["world"] == 2
    assert r0["params"] == r1["params"]  # gradients were all-reduced; ranks stay identical
    # evaluation is reduced over both shards: every rank reports all 240 items
    assert r0["history"][-1]["val_items"] == r1["history"][-1]["val_items"] == 240
    assert r0["history"][-1]["train_items"] == 240
    # only rank 0 writes metrics and checkpoints
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert "epoch-0002.pt" in names and set(names) <= {"epoch-0001.pt", "epoch-0002.pt"}


def test_write_new_claims_a_free_name_and_leaves_no_temporary(tmp_path: Path) -> None:
    from cdml_edge.errors import CdmlError
    from cdml_edge.nn.checkpoint import FORMAT, CheckpointError, load, write_new

    (tmp_path / "c.pt").write_bytes(b"someone else's")
    path = write_new(tmp_path, "c", {"format": FORMAT, "n": 1})
    assert path.name == "c.1.pt" and load(path)["n"] == 1
    assert (tmp_path / "c.pt").read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.1.pt", "c.pt"]
    assert issubclass(CheckpointError, CdmlError)


def test_seed_train_call_and_loss_weights() -> None:
    """The seed's ``CDMLTrainer(model, lr=...).train(loader, epochs=N)``."""
    import torch

    from cdml_edge.nn import CDMLTrainer, TabularEncoder

    torch.manual_seed(0)
    trainer = CDMLTrainer(
        TabularEncoder(input_dim=4, latent_dim=8, num_classes=3),
        lr=1e-2,
        device="cpu",
        alpha=1.0,
        beta=0.5,
        gamma=0.01,
    )
    assert (trainer.loss.ce_weight, trainer.loss.sparsity_weight) == (1.0, 0.01)
    train, val = loaders()
    history = trainer.train(train, epochs=2, val_loader=val)
    assert [r["epoch"] for r in history] == [1, 2] and history[-1]["val_acc"] > 0.9
    with pytest.raises(TypeError, match="not both"):
        CDMLTrainer(TabularEncoder(4), device="cpu", loss=trainer.loss, alpha=1.0)
