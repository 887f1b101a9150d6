"""The latent interface every cdml-edge model shares."""

from __future__ import annotations

from typing import Any, Literal, overload

import torch
from torch import nn


class LatentModel(nn.Module):
    """Base of all models: ``compress(x) -> z``, optional ``classifier(z)`` / ``decompress(z)``.

    Calling a model, ``model(x)``, gives its code ``z`` ``(N, latent_dim)``, as cdmltrain's
    ``z = encoder(x)``; ``model(x, return_dict=True)`` or :meth:`outputs` give the dict with
    ``latent`` and, where the model has them, ``logits`` and ``recon`` (what
    :class:`~cdml_edge.nn.CDMLLoss` takes). ``config`` holds the constructor arguments, so a
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

    @overload
    def forward(self, x: torch.Tensor, return_dict: Literal[False] = False) -> torch.Tensor: ...

    @overload
    def forward(self, x: torch.Tensor, return_dict: Literal[True]) -> dict[str, torch.Tensor]: ...

    def forward(
        self, x: torch.Tensor, return_dict: bool = False
    ) -> torch.Tensor | dict[str, torch.Tensor]:
        """The code ``z`` of ``x``; with ``return_dict``: ``latent``, ``logits``, ``recon``.

        ``logits`` and ``recon`` are there where the model has a head and a decoder.
        """
        z = self.compress(x)
        if not return_dict:
            return z
        out = {"latent": z}
        if self.head is not None:
            out["logits"] = self.head(z)
        if self.has_decoder:
            out["recon"] = self.decompress(z)
        return out

    def outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``model(x, return_dict=True)``: ``latent``, plus ``logits`` and ``recon`` if any."""
        out: dict[str, torch.Tensor] = self(x, return_dict=True)
        return out

    def num_parameters(self) -> int:
        """Number of parameters (elements, trainable or not)."""
        return sum(p.numel() for p in self.parameters())
