"""Time to the first training batch from a big ZIP of small PNGs, ours against zipfile.

Used by ``bench_s3.py``. Every row starts from nothing open (no dataset, no file handle)
and stops when the first shuffled batch of 64 decoded images comes out of
``DataLoader(num_workers=2)``; the one-process baselines stop after opening the archive
and reading 64 members at random (no decoding), as a script without a Dataset would.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import cv2
import numpy as np
import torch
from bench_dataset import ZipfileDataset
from timing import best_of, clocked, rounds, timed
from torch.utils.data import DataLoader, Dataset

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV
from cdml_edge.data.dataset import CDMLStreamDataset
from cdml_edge.data.samples import image_to_tensor

BATCH = 64
WORKERS = 2
REGION = "us-east-1"


def make_zip(n: int) -> bytes:
    """``n`` 4x4 PNGs in 10 class folders (64 distinct images, reused): quick to make."""
    rng = np.random.default_rng(0)
    pngs = [
        cv2.imencode(".png", rng.integers(0, 255, (4, 4, 3), dtype=np.uint8))[1].tobytes()
        for _ in range(64)
    ]
    return pack(((f"class{i % 10}/{i:07d}.png", pngs[i % 64]) for i in range(n)), "zip", mtime=0)


def full_decode(data: bytes) -> torch.Tensor:
    """The baseline's decode: OpenCV at full size, RGB, float32 C×H×W in [0, 1]."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("OpenCV cannot decode this image")
    return image_to_tensor(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


def zipfile_dataset(opener: Callable[[], BinaryIO]) -> ZipfileDataset:
    """What a user writes without us: zipfile in each worker, labels from the folder."""
    return ZipfileDataset(opener, full_decode)


def first_batch(ds: Dataset[Any]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, generator=gen)
    it = iter(loader)
    x, _ = next(it)
    del it  # the workers stop
    return x


def one_process(opener: Callable[[], BinaryIO], names: list[str]) -> None:
    zf = zipfile.ZipFile(opener())
    for n in names:
        zf.read(n)


def open_local(path: str) -> BinaryIO:
    return open(path, "rb")


def open_s3fs(endpoint: str, path: str) -> BinaryIO:
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint, "region_name": REGION})
    return fs.open(path, "rb")


@dataclass
class Row:
    label: str
    seconds: float
    build: float | None = None  # of which building the dataset


def timed_row(label: str, fn: Callable[[], Any], repeat: int) -> Row:
    """The best of ``repeat`` runs of ``fn``."""
    return Row(label, best_of(fn, repeat).wall)


def ours_row(label: str, path: str, repeat: int) -> Row:
    """The best of ``repeat`` runs of ours, with its share of building the dataset."""

    def once() -> tuple[float, float]:
        ds, build = clocked(
            lambda: CDMLStreamDataset(path, is_image=True, labels="folder", cache_size_mb=0)
        )
        return build.wall + timed(lambda: first_batch(ds)).wall, build.wall

    seconds, build = min(rounds({"ours": once}, repeat)["ours"])
    return Row(label, seconds, build)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in its own process (its copying does not hold our GIL)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def rows_for(n: int, endpoint: str, repeat: int) -> list[Row]:
    """Every row for an archive of ``n`` members, locally and on S3."""
    import boto3

    blob = make_zip(n)
    names = random.Random(1).sample(zipfile.ZipFile(_memory(blob)).namelist(), BATCH)
    key = f"big-{n}.zip"
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    with contextlib.suppress(Exception):
        s3.create_bucket(Bucket="bench")
    s3.put_object(Bucket="bench", Key=key, Body=blob)
    url, s3path = f"s3://bench/{key}", f"bench/{key}"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, key)
        with open(local, "wb") as fh:
            fh.write(blob)
        rows += local_rows(local, names, repeat)
        os.environ[ENDPOINT_ENV] = endpoint
        os.environ[INDEX_CACHE_ENV] = "off"
        rows.append(ours_row("S3, ours, cold (no index cache)", url, repeat))
        os.environ[INDEX_CACHE_ENV] = os.path.join(tmp, "s3-index")
        CDMLStreamDataset(url, labels="folder")  # fills the cache
        rows.append(ours_row("S3, ours, index cache hit", url, repeat))
        opener = functools.partial(open_s3fs, endpoint, s3path)
        rows.append(
            timed_row("S3, s3fs + zipfile, one process", lambda: one_process(opener, names), repeat)
        )
        rows.append(
            timed_row(
                "S3, s3fs + zipfile Dataset", lambda: first_batch(zipfile_dataset(opener)), repeat
            )
        )
    s3.delete_object(Bucket="bench", Key=key)
    return rows


def local_rows(path: str, names: list[str], repeat: int) -> list[Row]:
    opener = functools.partial(open_local, path)
    return [
        ours_row("local, ours", path, repeat),
        timed_row("local, zipfile, one process", lambda: one_process(opener, names), repeat),
        timed_row("local, zipfile Dataset", lambda: first_batch(zipfile_dataset(opener)), repeat),
    ]


def _memory(blob: bytes) -> BinaryIO:
    import io

    return io.BytesIO(blob)


def report(n: int, rows: list[Row]) -> None:
    by = {r.label: r for r in rows}
    print(f"\n{n:,} members: seconds to the first shuffled batch of {BATCH} ({WORKERS} workers)")
    print(f"{'reader':42} {'seconds':>8} {'of which build':>15}")
    for r in rows:
        build = f"{r.build:15.2f}" if r.build is not None else f"{'':15}"
        print(f"{r.label:42} {r.seconds:8.2f} {build}")
    base = by["S3, s3fs + zipfile, one process"].seconds
    cold = by["S3, ours, cold (no index cache)"].seconds
    hit = by["S3, ours, index cache hit"].seconds
    print(f"S3 cold / s3fs one process: {cold / base:.2f} (target <= 1.0)")
    print(f"S3 cache hit / s3fs one process: {hit / base:.2f} (target <= 0.5)")
    print(f"S3 cold / s3fs Dataset: {cold / by['S3, s3fs + zipfile Dataset'].seconds:.2f}")
    local = by["local, ours"].seconds
    print(
        f"local / zipfile Dataset: {local / by['local, zipfile Dataset'].seconds:.2f}; "
        f"local first batch {local:.2f} s (target < 0.4 s)"
    )
