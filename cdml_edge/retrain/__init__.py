"""The retraining loop on retained windows (torch-free): replay and training export.

* :mod:`~cdml_edge.retrain.replay` — re-score retained windows with the live pipeline,
  deterministically (:func:`iter_replay`, :func:`replay_to_jsonl`);
* :mod:`~cdml_edge.retrain.export` — retained items -> a class-folder training archive with
  provenance (:func:`export_trainset`); its member names and splits are in
  :mod:`~cdml_edge.retrain.layout`, human relabels in :mod:`~cdml_edge.retrain.relabels`;
* :mod:`~cdml_edge.retrain.filters` — ``--filter`` expressions and ``--since``/``--until``;
* :mod:`~cdml_edge.retrain.replay_job`, :mod:`~cdml_edge.retrain.export_job` — what
  ``cdml-edge replay`` / ``export`` run: typed options in, a summary out;
* :mod:`~cdml_edge.retrain.errors` — ``ExportError``, ``OptionError``, ``ReplayError``.
"""

from __future__ import annotations

from cdml_edge.retrain.errors import ExportError, OptionError, ReplayError
from cdml_edge.retrain.export import ExportStats, export_trainset
from cdml_edge.retrain.filters import FilterError, ItemFilter, parse_filter, parse_time
from cdml_edge.retrain.replay import ReplayStats, iter_replay, replay_to_jsonl

__all__ = [
    "ExportError",
    "ExportStats",
    "FilterError",
    "ItemFilter",
    "OptionError",
    "ReplayError",
    "ReplayStats",
    "export_trainset",
    "iter_replay",
    "parse_filter",
    "parse_time",
    "replay_to_jsonl",
]
