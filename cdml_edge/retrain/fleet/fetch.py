"""Bytes of a fleet's windows, from local files or ``s3://``, with the requests counted.

* a sidecar, or an archive that is needed whole (replay needs every member and the
  archive's SHA-256), is one ``GET``: :func:`fetch_whole` opens an
  :class:`~cdml_edge.archive.s3.S3Source` whose tail read spans the whole object;
* an archive of which only some members are needed goes through the ranged reader when it
  is larger than ``whole_limit`` (:func:`archive_source`): its index costs at most two
  ``GET`` and the members one more (coalesced by ``read_many``); a smaller one is fetched
  whole, which is one request instead of up to three.

Local files are read as the local engine reads them (:func:`~cdml_edge.store.ondisk.
read_regular`): a link, FIFO or other special file, or a file larger than its listed size, is
refused unread with a :class:`~cdml_edge.store.ondisk.RetentionError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdml_edge.retrain.fleet.locations import S3Options, is_s3
from cdml_edge.store.ondisk import RetentionError, read_regular

DEFAULT_WHOLE_LIMIT = 4 << 20  # archives up to this size are fetched whole
LOCAL_LIMIT = 1 << 30  # a local file of unknown size is read up to this many bytes


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` refuses a local file for what it is (not merely gone since listed)."""
    return isinstance(exc, RetentionError) and not isinstance(exc.__cause__, FileNotFoundError)


@dataclass
class FetchCount:
    """Requests and bytes one read task sent to S3 (zero for local files)."""

    requests: int = 0
    bytes: int = 0

    def add(self, source: Any) -> None:
        """Add what an :class:`~cdml_edge.archive.s3.S3Source` has sent so far."""
        snap = source.stats.snapshot()
        self.requests += snap["requests"]
        self.bytes += snap["bytes_fetched"]


def _s3_source(url: str, s3: S3Options, tail_bytes: int | None = None) -> Any:
    from cdml_edge.archive.s3 import S3Source, parse_s3_url

    bucket, key = parse_s3_url(url)
    kwargs: dict[str, Any] = {"endpoint_url": s3.endpoint_url, "region": s3.region}
    if tail_bytes is not None:
        kwargs["tail_bytes"] = max(1, tail_bytes)
    return S3Source(bucket, key, **kwargs)


def fetch_whole(location: str, size_hint: int, s3: S3Options, count: FetchCount) -> bytes:
    """The whole file or object (one ``GET`` when ``size_hint`` is its listed size)."""
    if not is_s3(location):
        return read_regular(location, size_hint or LOCAL_LIMIT)
    source = _s3_source(location, s3, tail_bytes=size_hint or None)
    try:
        source.open()
        return bytes(source.pread(0, source.size()))
    finally:
        count.add(source)


def archive_source(
    location: str, size: int, s3: S3Options, whole_limit: int, count: FetchCount
) -> tuple[Any, Any]:
    """What :func:`~cdml_edge.archive.open_archive` should read for part of an archive.

    Also the S3 source to count afterwards (``None`` when nothing is left to count).
    """
    if not is_s3(location):
        return read_regular(location, size or LOCAL_LIMIT), None
    if size <= whole_limit:
        return fetch_whole(location, size, s3, count), None
    source = _s3_source(location, s3)
    source.open()
    return source, source


__all__ = [
    "DEFAULT_WHOLE_LIMIT",
    "LOCAL_LIMIT",
    "FetchCount",
    "archive_source",
    "fetch_whole",
    "refused",
]
