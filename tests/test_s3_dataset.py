"""CDMLStreamDataset("s3://...") with DataLoader workers, against a loopback S3 server."""

from __future__ import annotations

import os

import pytest
from _s3_fixtures import S3Server, s3_server_fixture  # noqa: F401  (fixture)
from torch.utils.data import DataLoader

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV
from cdml_edge.data.dataset import CDMLStreamDataset

BUCKET = "datasets"
N = 240
WORKERS = 2
BATCH = 16


def _items() -> list[tuple[str, bytes]]:
    return [
        (f"{('ok', 'scratch', 'dent')[i % 3]}/{i:04d}.bin", os.urandom(64 + i)) for i in range(N)
    ]


@pytest.fixture(scope="module")
def uploaded(s3_server: S3Server) -> dict[str, dict[str, bytes]]:
    items = _items()
    for key, fmt in (("train.zip", "zip"), ("train.tar.zst", "tar.zst")):
        s3_server.put(
            BUCKET, key, pack(items, fmt, frame_bytes=4096) if fmt != "zip" else pack(items, fmt)
        )
    return {"items": dict(items)}


def _collect(ds: CDMLStreamDataset) -> dict[str, tuple[bytes, str]]:
    loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=list)
    got: dict[str, tuple[bytes, str]] = {}
    names = iter(ds.names)
    for batch in loader:
        for x, y in batch:
            got[next(names)] = (x, ds.classes[y])
    return got


@pytest.mark.parametrize("key", ["train.zip", "train.tar.zst"])
def test_dataloader_workers_read_s3(
    s3_server: S3Server, uploaded: dict, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.delenv(INDEX_CACHE_ENV, raising=False)
    s3_server.proxy.reset()
    ds = CDMLStreamDataset(f"s3://{BUCKET}/{key}", labels="folder", cache_size_mb=0)
    assert len(ds) == N and ds.classes == ["dent", "ok", "scratch"]
    got = _collect(ds)
    items = uploaded["items"]
    assert set(got) == set(items)
    for name, (x, label) in got.items():
        assert x == items[name] and label == name.split("/")[0]
    # every process (parent + workers) opens once: index <= 2 requests each; then each
    # batch is one read_many, coalesced into one GET (members are neighbours)
    batches = -(-N // BATCH)
    assert s3_server.proxy.count("HEAD") == 0
    assert s3_server.proxy.count("GET") <= 2 * (1 + WORKERS) + batches


def test_workers_use_the_index_cache(
    s3_server: S3Server, uploaded: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, os.fspath(tmp_path))
    ds = CDMLStreamDataset(f"s3://{BUCKET}/train.zip", labels="folder", cache_size_mb=0)
    s3_server.proxy.reset()
    got = _collect(ds)
    assert len(got) == N
    # each worker opens with one HEAD (ETag check) and no index GET
    assert s3_server.proxy.count("HEAD") == WORKERS
    assert s3_server.proxy.count("GET") <= -(-N // BATCH)
