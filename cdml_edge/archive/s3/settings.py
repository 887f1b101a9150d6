"""Process-wide defaults for ``s3://`` sources, kept in environment variables.

:func:`~cdml_edge.archive.s3.source.open_s3_source` reads them; keeping them in the
environment means DataLoader workers and subprocesses (forked or spawned) inherit them.

The index cache is on by default, in the user's cache folder
(``$XDG_CACHE_HOME/cdml-edge/s3-index``, by default ``~/.cache/cdml-edge/s3-index``);
``CDML_EDGE_S3_INDEX_CACHE`` names another folder, or ``off`` turns it off.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cdml_edge.units import size_from_env

if TYPE_CHECKING:
    from cdml_edge.config import S3Config

ENDPOINT_ENV = "CDML_EDGE_S3_ENDPOINT"
REGION_ENV = "CDML_EDGE_S3_REGION"
INDEX_CACHE_ENV = "CDML_EDGE_S3_INDEX_CACHE"
INDEX_CACHE_BYTES_ENV = "CDML_EDGE_S3_INDEX_CACHE_BYTES"
#: the slowest transfer a request may average, bytes/s (``0``: no deadline)
MIN_RATE_ENV = "CDML_EDGE_S3_MIN_RATE"
#: default of :data:`MIN_RATE_ENV`: 16 MiB (the longest coalesced GET) in 512 s + 60 s
DEFAULT_MIN_RATE = 32 << 10
#: values of ``CDML_EDGE_S3_INDEX_CACHE`` that turn the index cache off
CACHE_OFF = frozenset({"off", "0", "none", "false", "no"})


def default_index_cache_dir() -> str:
    """The user's cache folder for S3 archive indexes (follows ``$XDG_CACHE_HOME``)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "cdml-edge", "s3-index")


def index_cache_dir() -> str | None:
    """The index cache folder in effect: the environment's, the default one, or ``None``.

    ``None`` when ``CDML_EDGE_S3_INDEX_CACHE`` is ``off``.
    """
    value = os.environ.get(INDEX_CACHE_ENV, "").strip()
    if value.lower() in CACHE_OFF:
        return None
    return value or default_index_cache_dir()


def min_rate_from_env() -> float:
    """The minimum rate of a request in bytes/s: ``$CDML_EDGE_S3_MIN_RATE`` or 32 KiB/s.

    Written as a size (``32768``, ``32KiB``, ``1MB``); ``0`` or ``off`` turns the
    per-request deadline off. ``ValueError`` naming the variable otherwise.
    """
    raw = os.environ.get(MIN_RATE_ENV, "").strip()
    if raw.lower() in CACHE_OFF:
        return 0.0
    return float(size_from_env(MIN_RATE_ENV, DEFAULT_MIN_RATE))


def configure_s3(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    index_cache: str | os.PathLike[str] | bool | None = None,
    index_cache_bytes: int | None = None,
    min_rate: int | None = None,
) -> None:
    """Process-wide defaults for ``s3://`` (e.g. from the configuration file).

    They are kept in the environment variables :func:`.source.open_s3_source` reads, so DataLoader
    workers and subprocesses (forked or spawned) inherit them. ``None`` leaves a setting
    as it is; ``index_cache=False`` turns the index cache off, ``True`` back on in the
    default folder. ``min_rate`` (bytes/s, ``0``: off) bounds how long one request may
    last (see :class:`.client.RetryPolicy`).
    """
    if index_cache is True:
        os.environ.pop(INDEX_CACHE_ENV, None)
        index_cache = None
    elif index_cache is False:
        index_cache = "off"
    values = {
        ENDPOINT_ENV: endpoint_url,
        REGION_ENV: region,
        INDEX_CACHE_ENV: os.fspath(index_cache) if index_cache is not None else None,
        INDEX_CACHE_BYTES_ENV: str(int(index_cache_bytes)) if index_cache_bytes else None,
        MIN_RATE_ENV: str(int(min_rate)) if min_rate is not None else None,
    }
    for name, value in values.items():
        if value is not None:
            os.environ[name] = value


def apply_s3_config(cfg: S3Config) -> None:
    """Make the ``s3:`` section of a config the process defaults (inherited by workers)."""
    configure_s3(
        endpoint_url=cfg.endpoint,
        region=cfg.region,
        index_cache=cfg.index_cache if cfg.use_index_cache else False,
        index_cache_bytes=cfg.index_cache_bytes,
        min_rate=cfg.min_rate,
    )
