"""``s3://`` archives: objects read by HTTP byte ranges, never downloaded whole.

:func:`open_s3_source` gives an :class:`S3Source` (a ByteSource; ``open_archive("s3://...")``
calls it), :func:`configure_s3` / :func:`apply_s3_config` set the process defaults,
:class:`S3IndexCache` keeps archive indexes on local disk between opens. Errors are typed
(:class:`S3AccessError`, :class:`S3NotFoundError`, ...) and name bucket and key.
"""

from cdml_edge.archive.s3.client import RetryPolicy, S3Stats
from cdml_edge.archive.s3.errors import (
    S3AccessError,
    S3Error,
    S3NotFoundError,
    S3ObjectChangedError,
    S3TransientError,
)
from cdml_edge.archive.s3.index_cache import DEFAULT_INDEX_CACHE_BYTES, S3IndexCache
from cdml_edge.archive.s3.settings import (
    ENDPOINT_ENV,
    INDEX_CACHE_BYTES_ENV,
    INDEX_CACHE_ENV,
    REGION_ENV,
    apply_s3_config,
    configure_s3,
)
from cdml_edge.archive.s3.source import (
    DEFAULT_GAP,
    DEFAULT_MAX_REQUEST,
    DEFAULT_PART_BYTES,
    DEFAULT_TAIL_BYTES,
    S3Source,
    open_s3_source,
    parse_s3_url,
)

__all__ = [
    "DEFAULT_GAP",
    "DEFAULT_INDEX_CACHE_BYTES",
    "DEFAULT_MAX_REQUEST",
    "DEFAULT_PART_BYTES",
    "DEFAULT_TAIL_BYTES",
    "ENDPOINT_ENV",
    "INDEX_CACHE_BYTES_ENV",
    "INDEX_CACHE_ENV",
    "REGION_ENV",
    "RetryPolicy",
    "S3AccessError",
    "S3Error",
    "S3IndexCache",
    "S3NotFoundError",
    "S3ObjectChangedError",
    "S3Source",
    "S3Stats",
    "S3TransientError",
    "apply_s3_config",
    "configure_s3",
    "open_s3_source",
    "parse_s3_url",
]
