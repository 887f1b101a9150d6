"""Process-wide defaults for ``s3://`` sources, kept in environment variables.

:func:`~cdml_edge.archive.s3.source.open_s3_source` reads them; keeping them in the
environment means DataLoader workers and subprocesses (forked or spawned) inherit them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdml_edge.config import S3Config

ENDPOINT_ENV = "CDML_EDGE_S3_ENDPOINT"
REGION_ENV = "CDML_EDGE_S3_REGION"
INDEX_CACHE_ENV = "CDML_EDGE_S3_INDEX_CACHE"
INDEX_CACHE_BYTES_ENV = "CDML_EDGE_S3_INDEX_CACHE_BYTES"


def configure_s3(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    index_cache: str | os.PathLike[str] | None = None,
    index_cache_bytes: int | None = None,
) -> None:
    """Process-wide defaults for ``s3://`` (e.g. from the configuration file).

    They are kept in the environment variables :func:`.source.open_s3_source` reads, so DataLoader
    workers and subprocesses (forked or spawned) inherit them. ``None`` leaves a setting
    as it is.
    """
    values = {
        ENDPOINT_ENV: endpoint_url,
        REGION_ENV: region,
        INDEX_CACHE_ENV: os.fspath(index_cache) if index_cache is not None else None,
        INDEX_CACHE_BYTES_ENV: str(int(index_cache_bytes)) if index_cache_bytes else None,
    }
    for name, value in values.items():
        if value is not None:
            os.environ[name] = value


def apply_s3_config(cfg: S3Config) -> None:
    """Make the ``s3:`` section of a config the process defaults (inherited by workers)."""
    configure_s3(
        endpoint_url=cfg.endpoint,
        region=cfg.region,
        index_cache=cfg.index_cache,
        index_cache_bytes=cfg.index_cache_bytes if cfg.index_cache else None,
    )
