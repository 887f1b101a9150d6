"""A fork while another thread of the parent is inside an ``s3://`` read.

A forked DataLoader worker reads through the parent's :class:`S3Source` object (its
``clone()`` shares the source). A thread of the parent (a validation pass, a prefetching
loader) may hold one of the source's locks (the bytes held in memory, the request counters,
the measured pace) at the moment of the fork; the child inherits the lock held, by a thread
it does not have, and its first read waited for ever. The source's locks are made anew in
the child.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

import pytest
from helpers.forked import in_a_child
from helpers.s3_server import S3Server

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV, S3Source, open_s3_source

BUCKET = "fork-locks"
LOCKS: dict[str, Callable[[S3Source], threading.Lock]] = {
    "bytes held": lambda s: s._known_lock,
    "counters": lambda s: s.stats.lock,
    "pace": lambda s: s.pace.lock,
}


@pytest.fixture(scope="module")
def blob(s3_server: S3Server) -> bytes:
    data = random.Random(3).randbytes(400_000)
    s3_server.put(BUCKET, "blob.bin", data)
    return data


def _held_in_a_thread(lock: threading.Lock) -> Iterator[None]:
    """``lock`` held by another thread while the caller forks."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(120)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    assert held.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join(30)


@pytest.mark.parametrize("which", sorted(LOCKS))
def test_a_child_forked_while_a_thread_holds_a_lock_reads(
    s3_server: S3Server, blob: bytes, which: str
) -> None:
    src = open_s3_source(
        f"s3://{BUCKET}/blob.bin", endpoint_url=s3_server.proxy.url, index_cache=False
    )
    assert src.pread(10, 10) == blob[10:20]

    def child() -> bool:
        one = src.pread(1000, 100) == blob[1000:1100]
        many = src.pread_many([(5, 5), (300_000, 5)]) == [blob[5:10], blob[300_000:300_005]]
        return one and many

    for _ in _held_in_a_thread(LOCKS[which](src)):
        code = in_a_child(child, timeout=30)
    assert code == 0, f"the child ended with {code} (-9: it hung on the {which} lock)"
    assert src.pread(2000, 10) == blob[2000:2010]  # the parent's source goes on


def test_a_dataloader_worker_forked_mid_read_gets_its_batches(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through ``CDMLStreamDataset`` and ``DataLoader(num_workers=2)``."""
    from torch.utils.data import DataLoader

    from cdml_edge.data.dataset import CDMLStreamDataset

    items = [(f"c{i % 2}/{i:03d}.bin", bytes([i]) * 700) for i in range(32)]
    s3_server.put(BUCKET, "ds.zip", pack(items, "zip"))
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    ds = CDMLStreamDataset(f"s3://{BUCKET}/ds.zip", labels="folder", cache_size_mb=0)
    ds[0]  # the parent's archive is open: forked workers clone it
    source = ds._get_archive().source
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list, timeout=60)
    for _ in _held_in_a_thread(source._known_lock):
        got = sorted(x for batch in loader for x, _ in batch)
    assert got == sorted(data for _, data in items)
