"""cdml-edge: stream ML data straight out of compressed archives.

Heavy parts (torch, onnxruntime) are imported lazily, so ``import cdml_edge`` works on
an appliance without PyTorch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (imported on first use)
_LAZY = {
    "open_archive": "cdml_edge.archive",
    "pack": "cdml_edge.archive",
    "write_archive": "cdml_edge.archive",
    "Archive": "cdml_edge.archive",
    "ArchiveError": "cdml_edge.archive",
    "load_config": "cdml_edge.config",
    "ConfigError": "cdml_edge.config",
    "CDMLStreamDataset": "cdml_edge.data.dataset",
    "LiveBatchLoader": "cdml_edge.data.live",
    "GPULoader": "cdml_edge.data.gpu",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cdml_edge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
