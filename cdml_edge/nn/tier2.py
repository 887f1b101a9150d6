"""The Tier 2 image model: conv encoder -> latent code -> decoder, classifier on the code.

Sized for a Raspberry Pi: 557,837 parameters at the defaults (``latent_dim=64``,
``num_classes=10``, ``in_channels=3``, ``image_size=32``: cdmltrain 1.x's 3072-D input),
755,981 at ``image_size=64``; the exported encoder + classifier (no decoder) is about half
of that.
"""

from __future__ import annotations

import torch
from torch import nn

from cdml_edge.nn.base import LatentModel


def _down(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


def _up(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class CDMLTrainTier2(LatentModel):
    """Convolutional autoencoder with a classifier on its latent code.

    ``compress(x)`` maps ``(N, in_channels, image_size, image_size)`` images (or the same
    flattened, ``(N, in_channels * image_size**2)``: 3072-D at the defaults) to
    ``(N, latent_dim)`` codes, ``decompress(z)`` reconstructs images from codes,
    ``classifier(z)`` gives class logits (absent when ``num_classes=0``) and ``predict(x)``
    the class indices.
    """

    def __init__(
        self,
        latent_dim: int = 64,
        num_classes: int = 10,
        in_channels: int = 3,
        image_size: int = 32,
        width: int = 32,
    ) -> None:
        super().__init__()
        if image_size % 16 or image_size < 16:
            raise ValueError(f"image_size must be a multiple of 16, got {image_size}")
        self.config = {
            "latent_dim": latent_dim,
            "num_classes": num_classes,
            "in_channels": in_channels,
            "image_size": image_size,
            "width": width,
        }
        self.latent_dim = latent_dim
        self.num_classes = num_classes
        chans = [width, width * 2, width * 4, width * 4]
        self._feat = (chans[-1], image_size // 16, image_size // 16)
        self._image = (in_channels, image_size, image_size)
        flat = chans[-1] * (image_size // 16) ** 2
        self.encoder = nn.Sequential(
            _down(in_channels, chans[0]),
            _down(chans[0], chans[1]),
            _down(chans[1], chans[2]),
            _down(chans[2], chans[3]),
            nn.Flatten(),
            nn.Linear(flat, latent_dim),
        )
        self.expand = nn.Sequential(nn.Linear(latent_dim, flat), nn.ReLU(inplace=True))
        self.decoder = nn.Sequential(
            _up(chans[3], chans[2]),
            _up(chans[2], chans[1]),
            _up(chans[1], chans[0]),
            nn.ConvTranspose2d(chans[0], in_channels, 3, stride=2, padding=1, output_padding=1),
        )
        self.head: nn.Module | None = (
            nn.Sequential(
                nn.Linear(latent_dim, 128),
                nn.ReLU(inplace=True),
                nn.Dropout(0.2),
                nn.Linear(128, num_classes),
            )
            if num_classes
            else None
        )

    def compress(self, x: torch.Tensor) -> torch.Tensor:
        """The code of images ``x`` (flat vectors are reshaped to images first)."""
        if x.dim() == 2:  # cdmltrain 1.x's flat vectors
            x = x.view(x.shape[0], *self._image)
        return self.encoder(x)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Class indices ``(N,)`` of ``x`` (no gradient)."""
        return self.classifier(self.compress(x)).argmax(dim=1)

    def decompress(self, z: torch.Tensor) -> torch.Tensor:
        """Images reconstructed from codes ``z``."""
        h = self.expand(z).view(z.shape[0], *self._feat)
        return self.decoder(h)
