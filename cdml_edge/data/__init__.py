"""The training side: ``CDMLStreamDataset``, ``GPULoader`` and ``LiveBatchLoader``.

``CDMLStreamDataset`` and ``GPULoader`` need torch, ``LiveBatchLoader`` numpy only. Names are
imported lazily so ``cdml_edge.data.live_loader`` never pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CDMLStreamDataset": "cdml_edge.data.dataset",
    "GPULoader": "cdml_edge.data.gpu",
    "LiveBatchLoader": "cdml_edge.data.live_loader",
    "ByteLRU": "cdml_edge.data.cache",
    "CacheInfo": "cdml_edge.data.cache",
    "LabelError": "cdml_edge.data.labels",
    "DatasetError": "cdml_edge.data.dataset",
    "collate": "cdml_edge.data.batch",
    "Collated": "cdml_edge.data.batch",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cdml_edge.data' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
