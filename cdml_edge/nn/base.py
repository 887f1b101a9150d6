"""The latent interface every cdml-edge model shares."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class LatentModel(nn.Module):
    """Base of all models: ``compress(x) -> z``, optional ``classifier(z)`` / ``decompress(z)``.

    ``forward(x)`` returns a dict with ``latent`` and, where the model has them,
    ``logits`` and ``recon``. ``config`` holds the constructor arguments, so a
    checkpoint can rebuild the model (see :func:`cdml_edge.nn.build_model`).
    """

    config: dict[str, Any]
    head: nn.Module | None
    latent_dim: int
    num_classes: int

    def compress(self, x: torch.Tensor) -> torch.Tensor:
        """The code ``z`` of a batch ``x``, ``(N, latent_dim)``."""
        raise NotImplementedError

    def decompress(self, z: torch.Tensor) -> torch.Tensor:
        """The reconstruction of codes ``z``; ``NotImplementedError`` for models without one."""
        raise NotImplementedError(f"{type(self).__name__} has no decoder")

    @property
    def has_decoder(self) -> bool:
        """Whether the model overrides :meth:`decompress`."""
        return type(self).decompress is not LatentModel.decompress

    def classifier(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of codes ``z``; ``RuntimeError`` for a model built without a head."""
        if self.head is None:
            raise RuntimeError(f"{type(self).__name__} was built without a classifier head")
        return self.head(z)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``latent``, plus ``logits`` and ``recon`` where the model has them."""
        z = self.compress(x)
        out = {"latent": z}
        if self.head is not None:
            out["logits"] = self.head(z)
        if self.has_decoder:
            out["recon"] = self.decompress(z)
        return out

    def num_parameters(self) -> int:
        """Number of parameters (elements, trainable or not)."""
        return sum(p.numel() for p in self.parameters())
