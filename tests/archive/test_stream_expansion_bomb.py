"""A tar.zst whose stream expands without bound: the walk at open is held to ``max_ratio``.

A tar.zst without a seek table is walked once at open, and every byte of its tar stream is
decompressed on the way, member data included (zstd cannot seek inside a frame). A member of
zeros written as 4-byte RLE blocks expands 32,768 times: a 260 KB file walked 7.9 GiB in
5.7 s with the C core (10.1 s in Python), a 26 MB one would walk 800 GiB. Each member read
is held to the limits, but the walk was not. Past ``max_member_bytes`` of tar stream, the
walk now stops as soon as the stream is more than ``max_ratio`` times the compressed bytes
it came from (:class:`StreamTooLargeError`), on the C core and in Python; the seekable
cache's plain copy stops there too, writing no more.
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest
from helpers.plain_copies import opened, outcome
from helpers.zstd_blocks import BLOCK, MIB, RAW, RLE, zstd_frame

from cdml_edge.archive import open_archive
from cdml_edge.archive.errors import ArchiveError, StreamTooLargeError
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.seekable_cache import SeekableCache


def _zeros_member(size: int, head: bytes = b"") -> bytes:
    """A one-frame tar.zst: ``head`` (raw), a member of ``size`` zeros (RLE), a small one."""
    big = tarfile.TarInfo("big.bin")
    big.size, big.mtime = size, 0
    after = tarfile.TarInfo("after.txt")
    after.size, after.mtime = 5, 0
    start = head + big.tobuf(format=tarfile.USTAR_FORMAT)
    tail = after.tobuf(format=tarfile.USTAR_FORMAT) + b"hello" + b"\0" * (507 + 1024)
    blocks = [
        (RAW, len(start[i : i + BLOCK]), start[i : i + BLOCK]) for i in range(0, len(start), BLOCK)
    ]
    blocks += [(RLE, BLOCK, b"\0")] * (size // BLOCK) + [(RAW, len(tail), tail)]
    return zstd_frame(blocks, window=17 << 3)


@pytest.mark.parametrize("native", [True, False], ids=["c-walk", "python-walk"])
def test_a_stream_of_zeros_is_refused_past_the_limit_of_the_walk(
    tmp_path: Path, native: bool
) -> None:
    if native and plain_copier() is None:
        pytest.skip("the C core with zstd is not built")
    path = tmp_path / "zeros.tar.zst"
    path.write_bytes(_zeros_member(512 * MIB))  # 16 KB of file
    t0 = time.process_time()
    found = opened(path, native, max_member_bytes=64 * MIB)
    assert found[:2] == ("error", "StreamTooLargeError"), found[:2]
    assert "max_ratio=1100" in found[2] and str(path) in found[2]
    # stopped near the limit (64 MiB of stream), not after the 512 MiB
    assert time.process_time() - t0 < 5


def test_under_the_limit_the_same_archive_reads(tmp_path: Path) -> None:
    path = tmp_path / "zeros.tar.zst"
    path.write_bytes(_zeros_member(16 * MIB))
    for native in (True, False):
        found = opened(path, native, max_member_bytes=64 * MIB)
        assert found[0] == "open" and found[2] == ["big.bin", "after.txt"]
    with open_archive(path, max_member_bytes=64 * MIB) as arc:
        assert arc.read("after.txt") == b"hello"
        assert arc.read("big.bin") == bytes(16 * MIB)


def test_the_limit_follows_max_ratio(tmp_path: Path) -> None:
    path = tmp_path / "zeros.tar.zst"
    path.write_bytes(_zeros_member(96 * MIB))
    with pytest.raises(StreamTooLargeError):
        open_archive(path, max_member_bytes=64 * MIB)
    with open_archive(path, max_member_bytes=64 * MIB, max_ratio=40_000) as arc:
        assert arc.read("after.txt") == b"hello"
    assert issubclass(StreamTooLargeError, ArchiveError)


@pytest.mark.parametrize("native", [True, False], ids=["c-copy", "python-copy"])
def test_the_plain_copy_stops_at_the_limit_and_the_open_says_why(
    tmp_path: Path, native: bool
) -> None:
    if native and plain_copier() is None:
        pytest.skip("the C core with zstd is not built")
    import os

    # 5 MiB that zstd cannot shrink first (the copy's probe takes it for JPEGs), then zeros;
    # held to 20 times (100 MiB of stream): at the default 1,100 the test would write 5.5 GiB
    path = tmp_path / "zeros.tar.zst"
    path.write_bytes(_zeros_member(512 * MIB, head=_random_member(5 * MIB)))
    limits = {"max_member_bytes": 64 * MIB, "max_ratio": 20}
    copy = tmp_path / "copy.tar"
    found = outcome(path, copy, native, **limits)
    assert found == ("compressible",), found[:2]
    assert os.path.getsize(copy) < 128 * MIB  # it stopped writing near the limit
    cache = SeekableCache(tmp_path / "cache")
    with pytest.raises(StreamTooLargeError):
        open_archive(path, seekable_cache=cache, **limits)  # type: ignore[arg-type]


def _random_member(size: int) -> bytes:
    import os

    info = tarfile.TarInfo("noise.bin")
    info.size, info.mtime = size, 0
    out = io.BytesIO()
    out.write(info.tobuf(format=tarfile.USTAR_FORMAT))
    out.write(os.urandom(size))
    out.write(b"\0" * (-size % 512))
    return out.getvalue()
