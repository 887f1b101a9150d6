"""Encoders for audio, tabular and time-series input, with the same latent interface.

Each maps its input to a ``(N, latent_dim)`` code via ``compress`` and has an optional
classifier head (``num_classes > 0``). All are plain convolutions / linear layers so
they export cleanly to ONNX.
"""

from __future__ import annotations

import torch
from torch import nn

from cdml_edge.nn.aliases import pick, required
from cdml_edge.nn.base import LatentModel

LAYOUTS = ("channels_first", "channels_last")


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
    """Multichannel windows -> code (1-D convolutions).

    ``layout="channels_first"`` takes ``(N, channels, window)``; ``"channels_last"`` takes
    cdmltrain 1.x's ``(N, timesteps, features)``. Its names ``input_features`` (for
    ``channels``, and then ``channels_last`` unless ``layout`` says otherwise) and
    ``hidden_size`` (for ``width``) are accepted.
    """

    def __init__(
        self,
        channels: int | None = None,
        window: int = 256,
        latent_dim: int = 32,
        num_classes: int = 0,
        width: int | None = None,
        layout: str | None = None,
        *,
        input_features: int | None = None,
        hidden_size: int | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        chans = pick(owner, "channels", channels, "input_features", input_features) or 3
        wide = pick(owner, "width", width, "hidden_size", hidden_size) or 32
        layout = layout or ("channels_last" if input_features is not None else "channels_first")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.channels_last = layout == "channels_last"
        self.config = {
            "channels": chans,
            "window": window,
            "latent_dim": latent_dim,
            "num_classes": num_classes,
            "width": wide,
        }
        if self.channels_last:
            self.config["layout"] = layout
        self._build(chans, latent_dim, num_classes, wide)

    def frontend(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as ``(N, channels, window)`` (transposed from channels-last)."""
        return x.transpose(1, 2) if self.channels_last else x


class AudioEncoder(_Conv1dEncoder):
    """Audio -> code: MFCC frames ``(N, n_mfcc, frames)`` or raw waveforms.

    Waveforms come as ``(N, samples)`` or ``(N, 1, samples)``.

    ``input="waveform"`` adds a learned strided filterbank in front of the conv stack. When
    ``input`` is not given, a model built with ``n_mfcc`` or ``frames`` takes MFCCs and one
    built without them takes waveforms, as cdmltrain 1.x's ``AudioEncoder(latent_dim=64)``
    does; its ``in_channels`` (must be 1) and ``input_length`` (any length is taken) are
    accepted.
    """

    def __init__(
        self,
        n_mfcc: int | None = None,
        frames: int | None = None,
        latent_dim: int = 32,
        num_classes: int = 0,
        width: int = 32,
        input: str | None = None,
        *,
        in_channels: int | None = None,
        input_length: int | None = None,
    ) -> None:
        super().__init__()
        if input is None:
            input = "mfcc" if n_mfcc is not None or frames is not None else "waveform"
        if input not in ("mfcc", "waveform"):
            raise ValueError(f"input must be 'mfcc' or 'waveform', got {input!r}")
        if in_channels not in (None, 1) or (in_channels == 1 and input != "waveform"):
            raise ValueError(f"in_channels={in_channels}: only mono waveforms (1) are taken")
        if input_length is not None and input_length <= 0:
            raise ValueError(f"input_length must be > 0, got {input_length}")
        n_mfcc = 20 if n_mfcc is None else n_mfcc
        frames = 32 if frames is None else frames
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
        """MFCCs as they are; waveforms through the learned filterbank."""
        if self.filterbank is None:
            return x
        if x.dim() == 2:
            x = x.unsqueeze(1)
        return self.filterbank(x)


class TabularEncoder(LatentModel):
    """Feature rows ``(N, in_features)`` (anything past the batch dim is flattened) -> code.

    cdmltrain 1.x's name ``input_dim`` is accepted for ``in_features``.
    """

    def __init__(
        self,
        in_features: int | None = None,
        latent_dim: int = 16,
        num_classes: int = 0,
        hidden: int = 64,
        *,
        input_dim: int | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        in_features = required(
            owner,
            "in_features",
            pick(owner, "in_features", in_features, "input_dim", input_dim),
            "input_dim",
        )
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
        """The code of feature rows ``x``, ``(N, latent_dim)``."""
        return self.body(x)
