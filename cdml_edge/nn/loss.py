"""CDMLLoss: weighted reconstruction + cross-entropy on a model's output dict."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cdml_edge.nn.aliases import pick


class CDMLLoss(nn.Module):
    """``recon_weight * MSE(recon, x) + ce_weight * CE(logits, y)``.

    Terms whose inputs are absent (no decoder, no head, no labels) are skipped; a
    ``latent_weight`` adds an L2 penalty on the code (keeps distances meaningful), a
    ``sparsity_weight`` cdmltrain 1.x's L1 bottleneck term ``mean(|z|)``. Its names are
    accepted: ``alpha`` (``ce_weight``), ``beta`` (``recon_weight``), ``gamma``
    (``sparsity_weight``). Returns the total and a dict of the parts (floats) for logging.
    """

    def __init__(
        self,
        recon_weight: float | None = None,
        ce_weight: float | None = None,
        latent_weight: float = 0.0,
        sparsity_weight: float | None = None,
        *,
        alpha: float | None = None,
        beta: float | None = None,
        gamma: float | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        recon = pick(owner, "recon_weight", recon_weight, "beta", beta)
        ce = pick(owner, "ce_weight", ce_weight, "alpha", alpha)
        sparse = pick(owner, "sparsity_weight", sparsity_weight, "gamma", gamma)
        self.recon_weight = 1.0 if recon is None else recon
        self.ce_weight = 1.0 if ce is None else ce
        self.latent_weight = latent_weight
        self.sparsity_weight = 0.0 if sparse is None else sparse

    def forward(
        self, out: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The weighted total and each term by name, for model outputs ``out`` of ``x``.

        ``out`` is the dict of ``model(x, return_dict=True)`` (a tensor: ``TypeError``);
        ``ValueError`` when no term applies (no ``recon``, no ``logits`` with labels ``y``).
        """
        if not isinstance(out, dict):
            raise TypeError(
                "CDMLLoss takes a model's outputs dict: loss(model(x, return_dict=True), x, y)"
            )
        terms: dict[str, torch.Tensor] = {}
        if self.recon_weight and "recon" in out:
            terms["recon"] = self.recon_weight * F.mse_loss(out["recon"], x)
        if self.ce_weight and "logits" in out and y is not None:
            terms["ce"] = self.ce_weight * F.cross_entropy(out["logits"], y)
        if self.latent_weight:
            terms["latent"] = self.latent_weight * out["latent"].pow(2).sum(dim=1).mean()
        if self.sparsity_weight:
            terms["sparsity"] = self.sparsity_weight * out["latent"].abs().mean()
        if not terms:
            raise ValueError("CDMLLoss: no loss term applies (no recon, no logits/labels)")
        total = torch.stack(list(terms.values())).sum()
        return total, {k: float(v.detach()) for k, v in terms.items()}
