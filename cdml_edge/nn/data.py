"""Datasets whose items are exactly what the exported model sees (via ``prepare_item``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cdml_edge.data.dataset import CDMLStreamDataset
from cdml_edge.model.spec import AudioInput, ModelSpec, prepare_item


class SpecTransform:
    """Decoded array -> model input tensor, by :func:`cdml_edge.model.spec.prepare_item`.

    Picklable, so it works in DataLoader workers.
    """

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def __call__(self, decoded: Any) -> torch.Tensor:
        """The model input for one decoded array (or tensor)."""
        arr = decoded.numpy() if isinstance(decoded, torch.Tensor) else np.asarray(decoded)
        return torch.from_numpy(prepare_item(self.spec, arr))


def _as_array(decoded: Any) -> np.ndarray:
    """The decoded sample as an ``ndarray`` (module level, so it pickles for spawn workers)."""
    return np.asarray(decoded)


def spec_dataset(
    archive: Any, spec: ModelSpec, labels: Any = "folder", raw: bool = False, **kwargs: Any
) -> CDMLStreamDataset:
    """A :class:`CDMLStreamDataset` decoding members as the appliance does for ``spec``.

    ``raw=True`` yields the decoded arrays (to fit normalisation statistics) instead of
    model inputs.
    """
    opts: dict[str, Any] = {}
    if isinstance(spec.input, AudioInput):
        opts.update(spec.input.decode_kwargs(), audio_mode="mfcc")
    transform = _as_array if raw else SpecTransform(spec)
    return CDMLStreamDataset(
        archive, modality=spec.modality, labels=labels, transform=transform, **opts, **kwargs
    )
