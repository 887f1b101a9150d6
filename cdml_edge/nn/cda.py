"""Latent-space operations: prototypes, anomaly scores, nearest neighbours, interpolation.

What "compressed-domain algebra" should be: arithmetic on learned codes, not on
compressed bytes. The appliance uses :class:`AnomalyScorer` (exported inside the ONNX
graph by :class:`AnomalyHead`) for unlabelled sensors and audio.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from cdml_edge.nn.base import LatentModel


@torch.no_grad()
def encode(
    model: LatentModel, batches: Iterable[Any], device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Codes (and labels, when batches are ``(x, y)``) of every batch, on the CPU."""
    was_training = model.training
    model.eval()
    zs: list[torch.Tensor] = []
    ys: list[torch.Tensor] = []
    for batch in batches:
        x, y = (batch[0], batch[1]) if isinstance(batch, (list, tuple)) else (batch, None)
        zs.append(model.compress(x.to(device)).cpu())
        if y is not None:
            ys.append(torch.as_tensor(y).cpu())
    model.train(was_training)
    return torch.cat(zs), (torch.cat(ys) if ys else None)


def prototypes(latents: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Mean code of each class, ``(num_classes, D)``; classes without samples are NaN."""
    d = latents.shape[1]
    sums = torch.zeros(num_classes, d, dtype=latents.dtype).index_add_(0, labels, latents)
    counts = torch.bincount(labels, minlength=num_classes).to(latents.dtype)
    return sums / counts[:, None]


def nearest_prototype(latents: torch.Tensor, protos: torch.Tensor) -> torch.Tensor:
    """Index of the closest prototype (Euclidean) for each code."""
    return torch.cdist(latents, protos).argmin(dim=1)


def nearest_neighbours(
    query: torch.Tensor, bank: torch.Tensor, k: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` nearest codes in ``bank`` for each query: ``(distances, indices)``, ``(Q, k)``."""
    if k > bank.shape[0]:
        raise ValueError(f"k={k} exceeds the {bank.shape[0]} codes in the bank")
    dist = torch.cdist(query, bank)
    values, indices = dist.topk(k, dim=1, largest=False)
    return values, indices


def interpolate(z0: torch.Tensor, z1: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` codes on the straight line from ``z0`` to ``z1`` (both ends included)."""
    if steps < 2:
        raise ValueError("steps must be >= 2")
    t = torch.linspace(0.0, 1.0, steps, dtype=z0.dtype)[:, None]
    return (1 - t) * z0.reshape(1, -1) + t * z1.reshape(1, -1)


@dataclass
class AnomalyScorer:
    """Distance of a code to the prototype of normal data, scaled per dimension.

    ``score(z) = || (z - prototype) / scale ||_2 / sqrt(D)``; the threshold is the
    ``quantile`` of the scores of normal codes it was fitted on.
    """

    prototype: torch.Tensor
    scale: torch.Tensor
    threshold: float

    @classmethod
    def fit(
        cls, normal: torch.Tensor, quantile: float = 0.99, calibration: torch.Tensor | None = None
    ) -> AnomalyScorer:
        """Fit on normal codes.

        The threshold comes from ``calibration`` codes when given (held-out normal data), else
        from ``normal`` itself.
        """
        if normal.shape[0] < 2:
            raise ValueError("AnomalyScorer.fit needs at least two normal codes")
        proto = normal.mean(dim=0)
        scale = normal.std(dim=0).clamp_min(1e-3)
        scorer = cls(proto, scale, threshold=0.0)
        ref = calibration if calibration is not None else normal
        scorer.threshold = float(torch.quantile(scorer.score(ref), quantile))
        return scorer

    def score(self, latents: torch.Tensor) -> torch.Tensor:
        """The score of each code (see the class), ``(N,)``."""
        d = (latents - self.prototype) / self.scale
        return d.pow(2).mean(dim=1).sqrt()

    def is_anomalous(self, latents: torch.Tensor) -> torch.Tensor:
        """``score > threshold`` per code."""
        return self.score(latents) > self.threshold

    def state(self) -> dict[str, Any]:
        """Prototype, scale and threshold as plain lists and floats (JSON-ready)."""
        return {
            "prototype": self.prototype.tolist(),
            "scale": self.scale.tolist(),
            "threshold": self.threshold,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AnomalyScorer:
        """Inverse of :meth:`state`."""
        return cls(
            torch.tensor(state["prototype"], dtype=torch.float32),
            torch.tensor(state["scale"], dtype=torch.float32),
            float(state["threshold"]),
        )


class AnomalyHead(nn.Module):
    """Encoder + scorer as one module: ``x -> (anomaly, latent)`` (the exported graph)."""

    def __init__(self, model: LatentModel, scorer: AnomalyScorer) -> None:
        super().__init__()
        self.model = model
        self.prototype: torch.Tensor
        self.inv_scale: torch.Tensor
        self.register_buffer("prototype", scorer.prototype.detach().clone().float())
        self.register_buffer("inv_scale", 1.0 / scorer.scale.detach().clone().float())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(anomaly score, latent)`` of a batch ``x``."""
        z = self.model.compress(x)
        d = (z - self.prototype) * self.inv_scale
        return d.pow(2).mean(dim=1).sqrt(), z


def auroc(normal_scores: np.ndarray, anomaly_scores: np.ndarray) -> float:
    """Area under the ROC curve (probability an anomaly outscores a normal item; ties 1/2)."""
    a = np.asarray(normal_scores, dtype=np.float64).ravel()
    b = np.asarray(anomaly_scores, dtype=np.float64).ravel()
    if not a.size or not b.size:
        raise ValueError("auroc needs normal and anomalous scores")
    greater = (b[:, None] > a[None, :]).sum()
    ties = (b[:, None] == a[None, :]).sum()
    return float((greater + 0.5 * ties) / (a.size * b.size))
