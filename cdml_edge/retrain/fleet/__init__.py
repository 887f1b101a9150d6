"""Replay and training export over a whole fleet's retained windows, on Ray.

The ``ray`` extra (``pip install 'cdml-edge[ray]'``) is needed to run anything here; this
package imports without it. The per-window work is the local replay's and export's own
(:mod:`cdml_edge.retrain.replay`, :mod:`cdml_edge.retrain.export`), so results match the
local commands on the same windows.

* :mod:`.locations` — list the windows under a folder tree or an ``s3://`` prefix (hive
  partitions ``device=…/date=…``);
* :mod:`.fetch` — bytes from files or S3 (whole or by ranges), requests counted;
* :mod:`.rows` — what a read task makes of one window (window, item or export-plan rows);
* :mod:`.arrow` — the Arrow schemas of those rows;
* :mod:`.datasource` — the Ray Data datasource: one read task per group of windows;
* :mod:`.dataset` — :func:`read_items`, :func:`read_windows`: the windows as Ray Datasets;
* :mod:`.scorer`, :mod:`.replay` — fleet replay (actors that read, score and write Parquet
  parts; the summary);
* :mod:`.export` — fleet export (Ray tasks: the plan, then sharded training archives with
  provenance);
* :mod:`.session` — joining a cluster or starting a local Ray; :mod:`.jobs` — the CLI's calls.
"""

from __future__ import annotations

from typing import Any

from cdml_edge.retrain.fleet.locations import S3Options, WindowRef, list_windows
from cdml_edge.retrain.fleet.session import (
    INSTALL_HINT,
    FleetTuning,
    RayMissingError,
    RaySettings,
    ray_session,
    require_ray,
)

_LAZY = {
    "read_items": "cdml_edge.retrain.fleet.dataset",
    "read_windows": "cdml_edge.retrain.fleet.dataset",
    "fleet_replay": "cdml_edge.retrain.fleet.replay",
    "fleet_export": "cdml_edge.retrain.fleet.export",
}


def __getattr__(name: str) -> Any:
    """The Ray-backed functions, imported on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


__all__ = [
    "INSTALL_HINT",
    "FleetTuning",
    "RayMissingError",
    "RaySettings",
    "S3Options",
    "WindowRef",
    "fleet_export",
    "fleet_replay",
    "list_windows",
    "ray_session",
    "read_items",
    "read_windows",
    "require_ray",
]
