"""Model classes by name, so checkpoints can rebuild the model they hold."""

from __future__ import annotations

from typing import Any

from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.encoders import AudioEncoder, TabularEncoder, TimeSeriesEncoder
from cdml_edge.nn.tier2 import CDMLTrainTier2

MODEL_CLASSES: dict[str, type[LatentModel]] = {
    "CDMLTrainTier2": CDMLTrainTier2,
    "AudioEncoder": AudioEncoder,
    "TabularEncoder": TabularEncoder,
    "TimeSeriesEncoder": TimeSeriesEncoder,
}


def build_model(name: str, config: dict[str, Any]) -> LatentModel:
    """Instantiate a registered model class from its ``config``."""
    cls = MODEL_CLASSES.get(name)
    if cls is None:
        raise KeyError(f"unknown model class {name!r}; known: {sorted(MODEL_CLASSES)}")
    return cls(**config)
