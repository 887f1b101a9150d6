"""Encoders for audio, tabular and time-series input, with the same latent interface.

Each maps its input to a ``(N, latent_dim)`` code via ``compress`` and has an optional
classifier head (``num_classes > 0``). All are plain convolutions / linear layers so
they export cleanly to ONNX.
"""

from __future__ import annotations

import torch
from torch import nn

from cdml_edge.nn.base import LatentModel


def _conv1d(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm1d(cout),
        nn.ReLU(inplace=True),
    )


def _head(latent_dim: int, num_classes: int) -> nn.Module | None:
    if not num_classes:
        return None
    return nn.Sequential(
        nn.Linear(latent_dim, 64), nn.ReLU(inplace=True), nn.Linear(64, num_classes)
    )


class _Conv1dEncoder(LatentModel):
    """Shared body: a 1-D conv stack over time, global average pooling, a linear code."""

    def _build(self, in_ch: int, latent_dim: int, num_classes: int, width: int) -> None:
        self.latent_dim = latent_dim
        self.num_classes = num_classes
        self.body = nn.Sequential(
            _conv1d(in_ch, width, 5),
            _conv1d(width, width * 2, 5, stride=2),
            _conv1d(width * 2, width * 2, 3, stride=2),
            _conv1d(width * 2, width * 4, 3, stride=2),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
        )
        self.to_latent = nn.Linear(width * 4, latent_dim)
        self.head = _head(latent_dim, num_classes)

    def compress(self, x: torch.Tensor) -> torch.Tensor:
        return self.to_latent(self.body(self.frontend(x)))

    def frontend(self, x: torch.Tensor) -> torch.Tensor:
        return x


class TimeSeriesEncoder(_Conv1dEncoder):
    """Multichannel windows ``(N, channels, window)`` -> code (1-D convolutions)."""

    def __init__(
        self,
        channels: int = 3,
        window: int = 256,
        latent_dim: int = 32,
        num_classes: int = 0,
        width: int = 32,
    ) -> None:
        super().__init__()
        self.config = {
            "channels": channels,
            "window": window,
            "latent_dim": latent_dim,
            "num_classes": num_classes,
            "width": width,
        }
        self._build(channels, latent_dim, num_classes, width)


class AudioEncoder(_Conv1dEncoder):
    """Audio -> code: MFCC frames ``(N, n_mfcc, frames)`` or raw waveforms ``(N, samples)``.

    ``input="waveform"`` adds a learned strided filterbank in front of the conv stack.
    """

    def __init__(
        self,
        n_mfcc: int = 20,
        frames: int = 32,
        latent_dim: int = 32,
        num_classes: int = 0,
        width: int = 32,
        input: str = "mfcc",
    ) -> None:
        super().__init__()
        if input not in ("mfcc", "waveform"):
            raise ValueError(f"input must be 'mfcc' or 'waveform', got {input!r}")
        self.config = {
            "n_mfcc": n_mfcc,
            "frames": frames,
            "latent_dim": latent_dim,
            "num_classes": num_classes,
            "width": width,
            "input": input,
        }
        self.waveform = input == "waveform"
        self.filterbank: nn.Module | None = None
        if self.waveform:
            self.filterbank = nn.Sequential(
                nn.Conv1d(1, n_mfcc, 64, stride=16, padding=24, bias=False),
                nn.BatchNorm1d(n_mfcc),
                nn.ReLU(inplace=True),
                nn.MaxPool1d(4),
            )
        self._build(n_mfcc, latent_dim, num_classes, width)

    def frontend(self, x: torch.Tensor) -> torch.Tensor:
        if self.filterbank is None:
            return x
        if x.dim() == 2:
            x = x.unsqueeze(1)
        return self.filterbank(x)


class TabularEncoder(LatentModel):
    """Feature rows ``(N, in_features)`` (anything past the batch dim is flattened) -> code."""

    def __init__(
        self,
        in_features: int,
        latent_dim: int = 16,
        num_classes: int = 0,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.config = {
            "in_features": in_features,
            "latent_dim": latent_dim,
            "num_classes": num_classes,
            "hidden": hidden,
        }
        self.latent_dim = latent_dim
        self.num_classes = num_classes
        self.body = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, latent_dim),
        )
        self.head = _head(latent_dim, num_classes)

    def compress(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
