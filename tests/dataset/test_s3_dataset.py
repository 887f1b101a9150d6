"""CDMLStreamDataset("s3://...") with DataLoader workers, against a loopback S3 server."""

from __future__ import annotations

import io
import os
import zipfile
from typing import TYPE_CHECKING

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV

if TYPE_CHECKING:
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
    from torch.utils.data import DataLoader

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
    from cdml_edge.data.dataset import CDMLStreamDataset

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    s3_server.proxy.reset()
    ds = CDMLStreamDataset(f"s3://{BUCKET}/{key}", labels="folder", cache_size_mb=0)
    assert len(ds) == N and ds.classes == ["dent", "ok", "scratch"]
    got = _collect(ds)
    items = uploaded["items"]
    assert set(got) == set(items)
    for name, (x, label) in got.items():
        assert x == items[name] and label == name.split("/")[0]
    # the parent opens once (tail + central directory: <= 2 GETs); the workers get its
    # index and fetch nothing but members: each batch is one read_many, one GET
    batches = -(-N // BATCH)
    assert s3_server.proxy.count("HEAD") == 0
    assert s3_server.proxy.count("GET") <= 2 + batches


@pytest.mark.parametrize(
    "context",
    ["fork", pytest.param("spawn", marks=pytest.mark.slow)],  # spawn re-imports torch
)
def test_workers_fetch_no_index(
    s3_server: S3Server, uploaded: dict, monkeypatch: pytest.MonkeyPatch, context: str
) -> None:
    """Forked workers clone the parent's archive, spawned ones unpickle it with its index.

    Neither sends a HEAD or an index GET.
    """
    from torch.utils.data import DataLoader

    from cdml_edge.data.dataset import CDMLStreamDataset

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    items = {f"c{i % 2}/{i:04d}.bin": os.urandom(4096) for i in range(N)}  # past the tail read
    blob = pack(list(items.items()), "zip")
    s3_server.put(BUCKET, "wide.zip", blob)
    cd_start = zipfile.ZipFile(io.BytesIO(blob)).start_dir
    ds = CDMLStreamDataset(f"s3://{BUCKET}/wide.zip", labels="folder", cache_size_mb=0)
    s3_server.proxy.reset()
    loader = DataLoader(
        ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=list, multiprocessing_context=context
    )
    got = [x for batch in loader for x, _ in batch]
    assert got == [items[n] for n in ds.names]
    seen = s3_server.proxy.seen()
    assert 0 < len(seen) <= -(-N // BATCH)  # at most one GET per batch
    for s in seen:  # and only member bytes: no HEAD, no tail, no central directory
        assert s.method == "GET" and s.range is not None and not s.range.startswith("bytes=-")
        assert int(s.range.split("-")[0].removeprefix("bytes=")) < cd_start


def test_second_build_costs_one_head(
    s3_server: S3Server, uploaded: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    from cdml_edge.data.dataset import CDMLStreamDataset

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, os.fspath(tmp_path))
    CDMLStreamDataset(f"s3://{BUCKET}/train.zip", labels="folder", cache_size_mb=0)
    s3_server.proxy.reset()
    ds = CDMLStreamDataset(f"s3://{BUCKET}/train.zip", labels="folder", cache_size_mb=0)
    assert [s.method for s in s3_server.proxy.seen()] == ["HEAD"]  # ETag check, no GET
    got = _collect(ds)
    assert len(got) == N
    assert s3_server.proxy.count("HEAD") == 1  # the workers add none
    assert s3_server.proxy.count("GET") <= -(-N // BATCH)


def test_index_cache_is_on_by_default_in_the_user_cache_folder(
    s3_server: S3Server, uploaded: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    from cdml_edge.data.dataset import CDMLStreamDataset

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.delenv(INDEX_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", os.fspath(tmp_path))
    CDMLStreamDataset(f"s3://{BUCKET}/train.tar.zst", labels="folder")
    folder = os.path.join(os.fspath(tmp_path), "cdml-edge", "s3-index")
    assert len(os.listdir(folder)) == 1
    s3_server.proxy.reset()
    ds = CDMLStreamDataset(f"s3://{BUCKET}/train.tar.zst", labels="folder")
    assert [s.method for s in s3_server.proxy.seen()] == ["HEAD"]
    assert len(ds) == N
