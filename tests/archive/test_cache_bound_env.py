"""The byte bounds of the caches, from the environment: units as in the configuration.

``CDML_EDGE_SEEKABLE_CACHE_BYTES=256MiB`` (or the S3 index cache's) ended in a bare
``int()`` traceback that named no variable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import pack
from cdml_edge.archive.s3.settings import INDEX_CACHE_BYTES_ENV
from cdml_edge.archive.s3.source import open_s3_source
from cdml_edge.archive.seekable_cache import SEEKABLE_CACHE_BYTES_ENV, SeekableCache


def test_the_seekable_cache_bound_takes_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SEEKABLE_CACHE_BYTES_ENV, "256MiB")
    assert SeekableCache(tmp_path).max_bytes == 256 * 2**20
    monkeypatch.setenv(SEEKABLE_CACHE_BYTES_ENV, "1000000")
    assert SeekableCache(tmp_path).max_bytes == 1_000_000
    monkeypatch.setenv(SEEKABLE_CACHE_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match=f"{SEEKABLE_CACHE_BYTES_ENV}: not a size: 'lots'"):
        SeekableCache(tmp_path)


def test_the_s3_index_cache_bound_takes_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server: S3Server
) -> None:
    s3_server.put("bounds", "one.zip", pack([("a.txt", b"x")], "zip"))
    url = "s3://bounds/one.zip"
    monkeypatch.setenv(INDEX_CACHE_BYTES_ENV, "64MiB")
    src = open_s3_source(url, index_cache=tmp_path, endpoint_url=s3_server.url)
    assert src.index_cache is not None and src.index_cache.max_bytes == 64 * 2**20
    monkeypatch.setenv(INDEX_CACHE_BYTES_ENV, "-5")
    with pytest.raises(ValueError, match=INDEX_CACHE_BYTES_ENV):
        open_s3_source(url, index_cache=tmp_path, endpoint_url=s3_server.url)
