"""Review cases of ``CDMLStreamDataset("s3://...")`` against a loopback S3 server (moto).

An ``s3://`` failure met in a DataLoader worker reaches the training loop as its typed error
(not a ``RuntimeError``); reading members from the end backwards does not pull the object
into memory and into the index cache.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import (
    ENDPOINT_ENV,
    INDEX_CACHE_ENV,
    S3AccessError,
    S3Error,
    S3NotFoundError,
    S3ObjectChangedError,
)

BUCKET = "review"
N = 96


def _items() -> list[tuple[str, bytes]]:
    return [(f"c{i % 2}/{i:04d}.bin", os.urandom(3000 + i)) for i in range(N)]


@pytest.fixture
def endpoint(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    s3_server.proxy.reset()
    yield s3_server.proxy.url
    s3_server.proxy.reset()


def _epoch_after_first_batch(ds: object, change: object) -> None:
    """One epoch of two workers; ``change()`` runs once the first batch is in."""
    from torch.utils.data import DataLoader

    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list)  # type: ignore[arg-type]
    it = iter(loader)
    next(it)
    change()  # type: ignore[operator]
    for _ in it:
        pass


@pytest.mark.parametrize("what", ["deleted", "replaced", "forbidden"])
def test_worker_s3_errors_reach_the_loop_typed(
    s3_server: S3Server, endpoint: str, what: str
) -> None:
    """A 404, an ETag change or a 403 met by a worker raises its own type in the loop."""
    from cdml_edge.data.dataset import CDMLStreamDataset

    key = f"mid-epoch-{what}.zip"
    items = _items()
    s3_server.put(BUCKET, key, pack(items, "zip"))
    ds = CDMLStreamDataset(f"s3://{BUCKET}/{key}", labels="folder", cache_size_mb=0)

    def change() -> None:
        if what == "deleted":
            s3_server.client().delete_object(Bucket=BUCKET, Key=key)
        elif what == "replaced":
            s3_server.put(BUCKET, key, pack(items[:10], "zip"))
        else:
            s3_server.proxy.fail_next(1000, status=403, code="AccessDenied")

    expected = {
        "deleted": S3NotFoundError,
        "replaced": S3ObjectChangedError,
        "forbidden": S3AccessError,
    }[what]
    with pytest.raises(expected) as err:
        _epoch_after_first_batch(ds, change)
    assert isinstance(err.value, S3Error)
    assert (err.value.bucket, err.value.key) == (BUCKET, key)
    assert f"s3://{BUCKET}/{key}" in str(err.value)  # the worker's traceback, which names it
    assert "DataLoader worker" in str(err.value)


def test_one_argument_s3_error_keeps_its_fields() -> None:
    """``S3Error(message)`` (how a DataLoader re-raises a worker's error) finds the object."""
    text = (
        "Caught S3NotFoundError in DataLoader worker process 0.\nOriginal Traceback ...\n"
        "cdml_edge.archive.s3.errors.S3NotFoundError: s3://b-1/dir/x y.zip: no such object"
    )
    err = S3NotFoundError(text)
    assert (err.bucket, err.key, err.status) == ("b-1", "dir/x y.zip", None)
    assert str(err) == text
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is S3NotFoundError and str(again) == text and again.key == "dir/x y.zip"
    bare = S3Error("something else")
    assert (bare.bucket, bare.key) == ("", "") and str(bare) == "something else"


@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_reading_backwards_keeps_members_out_of_the_index(
    s3_server: S3Server, endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fmt: str
) -> None:
    """``ds[i]`` from the last member back: member bytes are neither held nor cached.

    The last member ends where the central directory (member index) begins, the one before
    it where the last begins, and so on: each read extended the bytes held from the tail,
    so every member read was taken for an index read, kept in memory and written again to
    the index cache (the whole object, one rewrite per member).
    """
    from cdml_edge.data.dataset import CDMLStreamDataset

    cache = tmp_path / "index-cache"
    monkeypatch.setenv(INDEX_CACHE_ENV, os.fspath(cache))
    key = f"backwards.{fmt}"
    items = _items()
    blob = pack(items, fmt, frame_bytes=4096) if fmt == "tar.zst" else pack(items, fmt)
    s3_server.put(BUCKET, key, blob)
    ds = CDMLStreamDataset(f"s3://{BUCKET}/{key}", cache_size_mb=0)
    source = ds._get_archive().source
    held = source.memory_bytes()
    cached = sum(p.stat().st_size for p in cache.iterdir())
    by_name = dict(items)
    for i in reversed(range(len(ds))):
        assert ds[i] == by_name[ds.names[i]]
    assert source.memory_bytes() == held
    assert sum(p.stat().st_size for p in cache.iterdir()) == cached


@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_open_archive_reading_backwards_keeps_members_out_of_the_index(
    s3_server: S3Server, endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fmt: str
) -> None:
    """The same through ``open_archive`` alone: its index phase ends once it is open."""
    from cdml_edge.archive import open_archive

    cache = tmp_path / "index-cache"
    monkeypatch.setenv(INDEX_CACHE_ENV, os.fspath(cache))
    key = f"backwards-open.{fmt}"
    items = _items()
    blob = pack(items, fmt, frame_bytes=4096) if fmt == "tar.zst" else pack(items, fmt)
    s3_server.put(BUCKET, key, blob)
    with open_archive(f"s3://{BUCKET}/{key}") as arc:
        held = arc.source.memory_bytes()
        cached = sum(p.stat().st_size for p in cache.iterdir())
        for name, data in reversed(items):
            assert arc.read(name) == data
        assert arc.source.memory_bytes() == held
    assert sum(p.stat().st_size for p in cache.iterdir()) == cached
