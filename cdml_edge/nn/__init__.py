"""Tier 2 models, training, latent-space operations and ONNX export (needs the ``train`` extra)."""

from __future__ import annotations

from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.cda import AnomalyHead, AnomalyScorer, auroc, interpolate, nearest_neighbours
from cdml_edge.nn.cda import prototypes as class_prototypes
from cdml_edge.nn.encoders import AudioEncoder, TabularEncoder, TimeSeriesEncoder
from cdml_edge.nn.loss import CDMLLoss
from cdml_edge.nn.registry import MODEL_CLASSES, build_model
from cdml_edge.nn.tier2 import CDMLTrainTier2
from cdml_edge.nn.train import CDMLTrainer, init_distributed

__all__ = [
    "MODEL_CLASSES",
    "AnomalyHead",
    "AnomalyScorer",
    "AudioEncoder",
    "CDMLLoss",
    "CDMLTrainTier2",
    "CDMLTrainer",
    "LatentModel",
    "TabularEncoder",
    "TimeSeriesEncoder",
    "auroc",
    "build_model",
    "init_distributed",
    "class_prototypes",
    "interpolate",
    "nearest_neighbours",
]
