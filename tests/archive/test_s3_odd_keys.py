"""``s3://`` URLs with odd keys, against the loopback S3 server (moto).

Spaces, non-ASCII letters, ``..`` and ``.`` parts, doubled and trailing slashes and the
characters URLs give a meaning (``?``, ``#``, ``%``, ``+``) are plain parts of an S3 key:
each names its own object (``a/../b.zip`` is not ``b.zip``) and its own index-cache entry.
A key that is no Unicode text (a name decoded with ``surrogateescape``, as ``sys.argv``
gives a non-UTF-8 argument) cannot be sent to S3: it is refused as no S3 URL, naming it,
instead of a ``UnicodeEncodeError`` from deep inside the index cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import open_archive, pack
from cdml_edge.archive.s3 import S3IndexCache, open_s3_source, parse_s3_url

BUCKET = "odd-keys"
KEYS = [
    "with space.zip",
    "üñí/çødé.zip",
    "a/../b.zip",
    "./c.zip",
    "d//e.zip",
    "dir/",
    "q?x=1.zip",
    "h#frag.zip",
    "pct%20x.zip",
    "plus+x.zip",
]


def test_odd_keys_each_name_their_own_object(s3_server: S3Server, tmp_path: Path) -> None:
    cache = S3IndexCache(tmp_path / "idx")
    contents = {}
    for i, key in enumerate(KEYS):
        contents[key] = pack([(f"m{j}.bin", os.urandom(100 + i)) for j in range(i + 1)], "zip")
        s3_server.put(BUCKET, key, contents[key])
    s3_server.put(BUCKET, "b.zip", pack([("other.bin", b"x")], "zip"))
    for i, key in enumerate(KEYS):
        url = f"s3://{BUCKET}/{key}"
        assert parse_s3_url(url) == (BUCKET, key)
        for _ in range(2):  # the second open is an index-cache hit
            src = open_s3_source(url, endpoint_url=s3_server.proxy.url, index_cache=cache)
            with open_archive(src) as arc:
                assert len(arc.names()) == i + 1, key
                assert arc.read("m0.bin") == _first(contents[key]), key
        assert src.index_source == "cache", key


def _first(zip_bytes: bytes) -> bytes:
    with open_archive(zip_bytes) as arc:
        return arc.read("m0.bin")


@pytest.mark.parametrize("url", ["s3://odd-keys/\udcff.zip", "s3://odd\udcff/k.zip"])
def test_a_key_that_is_no_text_is_refused_naming_it(url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as info:
        open_s3_source(url, endpoint_url="http://127.0.0.1:1", index_cache=tmp_path)
    assert not isinstance(info.value, UnicodeError), f"{type(info.value).__name__}: {info.value}"
    assert "UTF-8" in str(info.value) and repr(url) in str(info.value)
