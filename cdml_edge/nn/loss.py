"""CDMLLoss: weighted reconstruction + cross-entropy on a model's output dict."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CDMLLoss(nn.Module):
    """``recon_weight * MSE(recon, x) + ce_weight * CE(logits, y)``.

    Terms whose inputs are absent (no decoder, no head, no labels) are skipped; a
    ``latent_weight`` adds an L2 penalty on the code (keeps distances meaningful).
    Returns the total and a dict of the parts (floats) for logging.
    """

    def __init__(
        self, recon_weight: float = 1.0, ce_weight: float = 1.0, latent_weight: float = 0.0
    ) -> None:
        super().__init__()
        self.recon_weight = recon_weight
        self.ce_weight = ce_weight
        self.latent_weight = latent_weight

    def forward(
        self, out: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        terms: dict[str, torch.Tensor] = {}
        if self.recon_weight and "recon" in out:
            terms["recon"] = self.recon_weight * F.mse_loss(out["recon"], x)
        if self.ce_weight and "logits" in out and y is not None:
            terms["ce"] = self.ce_weight * F.cross_entropy(out["logits"], y)
        if self.latent_weight:
            terms["latent"] = self.latent_weight * out["latent"].pow(2).sum(dim=1).mean()
        if not terms:
            raise ValueError("CDMLLoss: no loss term applies (no recon, no logits/labels)")
        total = torch.stack(list(terms.values())).sum()
        return total, {k: float(v.detach()) for k, v in terms.items()}
