"""cdml-edge: stream ML data straight out of compressed archives.

Heavy parts (torch, onnxruntime) are imported lazily, so ``import cdml_edge`` works on
an appliance without PyTorch: the Tier 2 names (``CDMLTrainTier2``, ``CDMLTrainer``, ...)
import torch when first used, the live API (``watch_and_pack``, ``watch_in_memory``) never.
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
    "LiveBatchLoader": "cdml_edge.data.live_loader",
    "GPULoader": "cdml_edge.data.gpu",
    "watch_and_pack": "cdml_edge.live",
    "watch_in_memory": "cdml_edge.live",
    "PackedBatch": "cdml_edge.live",
    # Tier 2 (the ``train`` extra: torch)
    "CDMLTrainTier2": "cdml_edge.nn",
    "CDMLLoss": "cdml_edge.nn",
    "CDMLTrainer": "cdml_edge.nn",
    "AudioEncoder": "cdml_edge.nn",
    "TabularEncoder": "cdml_edge.nn",
    "TimeSeriesEncoder": "cdml_edge.nn",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cdml_edge' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "torch":
            raise
        raise ModuleNotFoundError(
            f"cdml_edge.{name} needs PyTorch, which is not installed here: "
            "pip install 'cdml-edge[train]' (the appliance itself runs without it)",
            name="torch",
        ) from exc
