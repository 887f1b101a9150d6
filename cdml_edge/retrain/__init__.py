"""Training export: retained windows -> a class-folder training archive (torch-free)."""

from __future__ import annotations

from cdml_edge.retrain.export import ExportError, ExportStats, export_trainset
from cdml_edge.retrain.filters import FilterError, ItemFilter, parse_filter, parse_time

__all__ = [
    "ExportError",
    "ExportStats",
    "FilterError",
    "ItemFilter",
    "export_trainset",
    "parse_filter",
    "parse_time",
]
