"""CDMLTrainer: fit / evaluate, JSON-lines metrics, checkpoints, resume, DDP under torchrun."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cdml_edge.model.spec import ModelSpec
from cdml_edge.nn import checkpoint
from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.loss import CDMLLoss

StepCallback = Callable[[int, int, float], None]  # (epoch, step, loss)


def resolve_device(device: str = "auto") -> torch.device:
    """``auto``: this rank's CUDA device when available, else the CPU.

    A name torch does not know, or a CUDA device this machine does not have, is a
    :class:`ValueError` saying so (not torch's own error at the first tensor moved there).
    """
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{device!r} is not a device (auto, cpu, cuda, cuda:N)") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError("CUDA is not available here (no GPU, or torch built without CUDA)")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"this machine has {count} CUDA device(s): cuda:0 to cuda:{count - 1}")
    return dev


def init_distributed(device: torch.device | str = "auto") -> bool:
    """Join the process group when started by ``torchrun`` (WORLD_SIZE > 1).

    gloo on the CPU, nccl on CUDA. Returns whether training is distributed. The
    trainer calls it; call it yourself first when building ``DistributedSampler``s.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        dev = resolve_device(device) if isinstance(device, str) else device
        backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    return True


def _split(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(batch, (list, tuple)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    if isinstance(batch, dict):
        return batch["input"], batch.get("label")
    return batch, None


class CDMLTrainer:
    """Train any :class:`LatentModel` with :class:`CDMLLoss` and Adam.

    ``schedule="cosine"`` decays the learning rate per epoch from ``lr`` to ``lr / 20``.
    cdmltrain 1.x's loss weights ``alpha`` / ``beta`` / ``gamma`` build the :class:`CDMLLoss`
    when no ``loss`` is given, and :meth:`train` is :meth:`fit` under cdmltrain's name.

    Batches are ``(x, y)``, ``x`` or ``{"input": x, "label": y}``. With ``out_dir``
    set, every epoch appends one JSON line to ``metrics.jsonl`` and writes a new
    checkpoint ``checkpoints/epoch-NNNN.pt`` (``epoch-NNNN-anomaly.pt`` once the spec is
    an anomaly model; never overwriting one); in a DDP run only rank 0 writes. Of the
    checkpoints it wrote, the last and the best (lowest validation loss, else training
    loss: :attr:`best_checkpoint`) are kept, the others deleted; ``keep_all`` keeps every one.
    ``on_epoch`` is called with each epoch's record (the line of ``metrics.jsonl``).
    """

    def __init__(
        self,
        model: LatentModel,
        lr: float = 1e-3,
        device: str = "auto",
        loss: CDMLLoss | None = None,
        out_dir: str | Path | None = None,
        spec: ModelSpec | None = None,
        weight_decay: float = 0.0,
        schedule: str = "constant",
        *,
        alpha: float | None = None,
        beta: float | None = None,
        gamma: float | None = None,
        keep_all: bool = False,
    ) -> None:
        if loss is not None and (alpha, beta, gamma) != (None, None, None):
            raise TypeError("CDMLTrainer: give loss or alpha/beta/gamma, not both")
        if schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
        self.schedule = schedule
        self.base_lr = lr
        self.device = resolve_device(device)
        self.distributed = init_distributed(self.device)
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self.model = model.to(self.device)
        self.net: nn.Module = (
            DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
            if self.distributed
            else self.model
        )
        self.loss = loss or CDMLLoss(alpha=alpha, beta=beta, gamma=gamma)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.spec = spec
        self.epoch = 0  # epochs completed
        self.history: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        self.last_checkpoint: Path | None = None
        self.best_checkpoint: Path | None = None
        self.keep_all = keep_all
        self._best_loss = math.inf
        self._written: list[Path] = []

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the process that logs and writes checkpoints)."""
        return self.rank == 0

    # -- training -----------------------------------------------------------------------------

    def fit(
        self,
        train_loader: Iterable[Any],
        val_loader: Iterable[Any] | None = None,
        epochs: int = 1,
        resume: str | Path | None = None,
        on_step: StepCallback | None = None,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train until ``epochs`` epochs are complete (counting resumed ones)."""
        if resume is not None:
            self.load_checkpoint(resume)
        while self.epoch < epochs:
            epoch = self.epoch + 1
            sampler = getattr(train_loader, "sampler", None)
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
            self._set_lr(epoch, epochs)
            t0 = time.perf_counter()
            train = self._train_epoch(train_loader, epoch, on_step)
            record: dict[str, Any] = {"epoch": epoch, **{f"train_{k}": v for k, v in train.items()}}
            if val_loader is not None:
                record.update({f"val_{k}": v for k, v in self.evaluate(val_loader).items()})
            record["seconds"] = round(time.perf_counter() - t0, 3)
            record["lr"] = self.optimizer.param_groups[0]["lr"]
            self.epoch = epoch
            self.history.append(record)
            if self.is_main and self.out_dir is not None:
                self._log(record)
                self.save_checkpoint()
            if on_epoch is not None and self.is_main:
                on_epoch(record)
        return self.history

    def train(
        self,
        train_loader: Iterable[Any],
        epochs: int = 1,
        val_loader: Iterable[Any] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """cdmltrain 1.x's ``trainer.train(loader, epochs=N)``: :meth:`fit`, ``epochs`` second."""
        return self.fit(train_loader, val_loader, epochs, **kwargs)

    def _set_lr(self, epoch: int, epochs: int) -> None:
        """Per-epoch learning rate; derived from the epoch number, so resume keeps it."""
        lr = self.base_lr
        if self.schedule == "cosine" and epochs > 1:
            lr = self.base_lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / epochs)))
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _train_epoch(
        self, loader: Iterable[Any], epoch: int, on_step: StepCallback | None
    ) -> dict[str, float]:
        self.net.train()
        total, correct, seen, items = 0.0, 0, 0, 0
        for step, batch in enumerate(loader):
            x, y = _split(batch)
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True) if y is not None else None
            out = self.net(x, return_dict=True)  # through DDP's forward: its hooks
            loss, _ = self.loss(out, x, y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            n = x.shape[0]
            total += float(loss.detach()) * n
            items += n
            if y is not None and "logits" in out:
                correct += int((out["logits"].argmax(1) == y).sum())
                seen += n
            if on_step is not None:
                on_step(epoch, step, float(loss.detach()))
        return self._reduce(total, correct, seen, items)

    @torch.no_grad()
    def evaluate(self, loader: Iterable[Any]) -> dict[str, float]:
        """Mean loss (and accuracy when labels and a head exist), summed over all ranks."""
        self.model.eval()
        total, correct, seen, items = 0.0, 0, 0, 0
        for batch in loader:
            x, y = _split(batch)
            x = x.to(self.device)
            y = y.to(self.device) if y is not None else None
            out = self.model.outputs(x)
            loss, _ = self.loss(out, x, y)
            n = x.shape[0]
            total += float(loss) * n
            items += n
            if y is not None and "logits" in out:
                correct += int((out["logits"].argmax(1) == y).sum())
                seen += n
        return self._reduce(total, correct, seen, items)

    def _reduce(self, total: float, correct: int, seen: int, items: int) -> dict[str, float]:
        if self.distributed:
            t = torch.tensor([total, correct, seen, items], dtype=torch.float64)
            t = t.to(self.device) if self.device.type == "cuda" else t
            dist.all_reduce(t)
            vals = [float(v) for v in t.cpu()]
            total, correct, seen, items = vals[0], int(vals[1]), int(vals[2]), int(vals[3])
        out = {"loss": total / max(items, 1), "items": float(items)}
        if seen:
            out["acc"] = correct / seen
        return out

    # -- persistence --------------------------------------------------------------------------

    def _log(self, record: dict[str, Any]) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"ts": round(time.time(), 3), **record}, sort_keys=True)
        path = self.out_dir / "metrics.jsonl"
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as exc:  # a full disk: a write's error names no file
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(path)) from exc

    def checkpoint_payload(self) -> dict[str, Any]:
        """What a checkpoint holds: the model, its optimizer, epoch, history, spec and extras.

        Weights are moved to the CPU.
        """
        return {
            "format": checkpoint.FORMAT,
            "model_class": type(self.model).__name__,
            "model_config": dict(self.model.config),
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "history": list(self.history),
            "spec": self.spec.model_dump_json() if self.spec is not None else None,
            "extra": dict(self.extra),
        }

    def save_checkpoint(self, directory: str | Path | None = None) -> Path:
        """Write a new checkpoint of the current state; returns its path."""
        base = Path(directory) if directory is not None else self.out_dir
        if base is None:
            raise ValueError("save_checkpoint: no directory and no out_dir")
        stem = checkpoint.stem_for(self.epoch, self.spec)
        path = checkpoint.write_new(base / "checkpoints", stem, self.checkpoint_payload())
        self.last_checkpoint = path
        self._keep_last_and_best(path)
        return path

    def _keep_last_and_best(self, path: Path) -> None:
        """Note ``path`` (just written); unless ``keep_all``, delete this trainer's others.

        Kept: the last and the best (lowest ``val_loss``, else ``train_loss``, of the epoch
        it holds; the earlier of two equal ones).
        """
        record = self.history[-1] if self.history else {}
        loss = record.get("val_loss", record.get("train_loss"))
        if loss is not None and float(loss) < self._best_loss:
            self._best_loss, self.best_checkpoint = float(loss), path
        self._written.append(path)
        if self.keep_all:
            return
        keep = {path, self.best_checkpoint}
        for old in [p for p in self._written if p not in keep]:
            old.unlink(missing_ok=True)
            self._written.remove(old)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, epoch counter, history, spec and extras."""
        ckpt = checkpoint.load(path)
        if ckpt["model_class"] != type(self.model).__name__:
            raise checkpoint.CheckpointError(
                f"{path}: holds a {ckpt['model_class']}, not a {type(self.model).__name__}"
            )
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.epoch = int(ckpt["epoch"])
        self.history = list(ckpt.get("history", []))
        self.extra = dict(ckpt.get("extra", {}))
        if ckpt.get("spec") and self.spec is None:
            self.spec = ModelSpec.model_validate_json(ckpt["spec"])
