"""Retained windows of a fleet as Ray Datasets: :func:`read_items` and :func:`read_windows`.

``read_items(root)`` gives one row per item — ``device``, ``source``, ``window_id``,
``item_id``, ``name``, ``member``, ``modality``, ``ts``, ``size``, ``sha256``, ``data`` (the
bytes), the results the device published (``label``, ``score``, ``anomaly``,
``anomaly_score``, ``model``, ``model_version``), ``closed_at``, ``location`` (the sidecar),
``status``/``error`` and one column per hive partition key (``date``, or
``partition_device`` beside the manifest's ``device``). ``read_windows(root)`` gives one row
per window with the whole ``archive`` and its ``sidecar`` (what replay reads). Rows whose
``status`` is not ``ok`` are windows or items that could not be read; ``data`` is then null.
"""

from __future__ import annotations

from typing import Any

from cdml_edge.retrain.fleet.fetch import DEFAULT_WHOLE_LIMIT
from cdml_edge.retrain.fleet.locations import S3Options, list_windows
from cdml_edge.retrain.fleet.rows import ItemRows, Scope, WindowRows
from cdml_edge.retrain.fleet.session import FleetTuning, require_ray


def read_items(
    root: str,
    *,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    s3: S3Options | None = None,
    whole_limit: int = DEFAULT_WHOLE_LIMIT,
    tuning: FleetTuning | None = None,
) -> Any:
    """One row per retained item under ``root`` (a folder tree or ``s3://bucket/prefix``)."""
    return _read(root, ItemRows, since, until, source, s3, whole_limit, tuning)


def read_windows(
    root: str,
    *,
    since: float | None = None,
    until: float | None = None,
    source: str | None = None,
    s3: S3Options | None = None,
    tuning: FleetTuning | None = None,
) -> Any:
    """One row per retained window under ``root``, with its archive bytes."""
    return _read(root, WindowRows, since, until, source, s3, DEFAULT_WHOLE_LIMIT, tuning)


def _read(
    root: str,
    kind: Any,
    since: float | None,
    until: float | None,
    source: str | None,
    s3: S3Options | None,
    whole_limit: int,
    tuning: FleetTuning | None,
) -> Any:
    require_ray()
    import ray.data

    from cdml_edge.retrain.fleet.datasource import WindowDatasource

    tune = tuning or FleetTuning()
    s3 = s3 or S3Options.from_env()
    listing = list_windows(root, since, until, s3)
    scope = Scope(s3, since, until, source, listing.partition_keys, whole_limit)
    return ray.data.read_datasource(
        WindowDatasource(listing.windows, kind(scope), task_bytes=tune.task_bytes),
        num_cpus=tune.read_cpus,
    )


__all__ = ["read_items", "read_windows"]
