"""What the S3 index cache finds at an entry's path when that is no entry it wrote.

The cache folder may be shared, or a user's ``~/.cache``: a FIFO, a symbolic link to a
device or a file far over the folder's bound may sit under an entry's name. Opening the
object must neither wait for ever on the FIFO nor read the link's target without end;
each counts as a miss, is removed, and the entry is written again from the network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import pack
from cdml_edge.archive.s3 import RetryPolicy, S3IndexCache, open_s3_source

BUCKET = "planted"
KEY = "train/a b.zip"
POLICY = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05, botocore_attempts=1)


def _release_fifo(path: Path) -> None:
    """Give a reader blocked opening ``path`` its end of file (the old code waits there)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader waiting (the fixed code), or no FIFO any more
        return
    os.close(fd)


def test_a_fifo_under_an_entry_name_is_a_miss_not_a_hang(
    s3_server: S3Server, tmp_path: Path
) -> None:
    data = pack([(f"c/{i}.bin", os.urandom(500)) for i in range(20)], "zip")
    s3_server.put(BUCKET, KEY, data)
    cache = S3IndexCache(tmp_path / "idx")
    cache.root.mkdir()
    entry = cache.path_for(S3IndexCache.ident(s3_server.proxy.url, BUCKET, KEY))
    os.mkfifo(entry)
    sizes: list[int] = []
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            url = f"s3://{BUCKET}/{KEY}"
            src = open_s3_source(url, endpoint_url=s3_server.proxy.url, index_cache=cache)
            sizes.append(src.size())
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=opener, daemon=True)
    thread.start()
    thread.join(60)  # the fixed code returns at once; the old one never did
    hung = thread.is_alive()
    _release_fifo(entry)
    thread.join(60)
    assert not hung, "opening the object waited on a FIFO planted in the index cache"
    assert not errors and sizes == [len(data)]
    assert entry.is_file() and not entry.is_symlink()  # a real entry took its place
    assert cache.get(S3IndexCache.ident(s3_server.proxy.url, BUCKET, KEY)) is not None


_READ_DEV_ZERO = """
import resource, sys
from cdml_edge.archive.s3 import S3IndexCache
resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))
cache = S3IndexCache(sys.argv[1], 1 << 20)
print("entry:", cache.get(sys.argv[2]))
"""


def test_a_link_to_a_device_under_an_entry_name_is_not_read(tmp_path: Path) -> None:
    """A symbolic link to ``/dev/zero``: the old code read it until memory ran out."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    cache = S3IndexCache(tmp_path, 1 << 20)
    ident = S3IndexCache.ident("http://127.0.0.1:1", BUCKET, KEY)
    os.symlink("/dev/zero", cache.path_for(ident))
    proc = subprocess.run(
        [sys.executable, "-c", _READ_DEV_ZERO, os.fspath(tmp_path), ident],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"reading the entry failed: {proc.stderr[-400:]}"
    assert proc.stdout.strip() == "entry: None"
    assert not cache.path_for(ident).is_symlink()  # removed as a bad entry


def test_an_entry_over_the_bound_is_not_read(tmp_path: Path) -> None:
    """A file far larger than the folder's bound is no entry the cache wrote: a miss."""
    cache = S3IndexCache(tmp_path, 1 << 20)
    ident = S3IndexCache.ident(None, BUCKET, KEY)
    assert cache.put(ident, '"e"', 100, [(0, b"x" * 100)])
    path = cache.path_for(ident)
    with path.open("r+b") as fh:  # the same entry, padded past the bound (sparse)
        fh.truncate(64 << 20)
    assert cache.get(ident) is None
    assert not path.exists()
