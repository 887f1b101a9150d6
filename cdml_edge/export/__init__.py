"""Training export: retained windows -> a class-folder training archive (torch-free)."""

from __future__ import annotations

from cdml_edge.export.filters import FilterError, ItemFilter, parse_filter, parse_time
from cdml_edge.export.trainset import ExportError, ExportStats, export_trainset

__all__ = [
    "ExportError",
    "ExportStats",
    "FilterError",
    "ItemFilter",
    "export_trainset",
    "parse_filter",
    "parse_time",
]
