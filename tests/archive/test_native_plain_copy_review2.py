"""Inputs on which the C core's plain copy differed from the Python path (a second review).

1. On a full disk, a stream the probe refuses (it shrinks too well, or it is cut or corrupt
   in its first 4 MiB) was judged by a probe that wrote nothing: ``False`` / ``EOFError``,
   where the Python path's probe writes as it goes and fails with the disk's ``OSError``.
   The probe before the C core writes its blocks too now.
2. A zstd block larger than the format allows (over 128 KiB, or over the frame's window)
   in a frame that states its content size: libzstd decodes a frame in one shot when its
   stated size fits the output offered, and checks less there. The C core offered 1 MiB,
   python-zstandard 128 KiB (``ZSTD_DStreamOutSize``): past the probe, the C core wrote a
   copy where the Python path raises. It gives each frame's first byte alone now, so
   libzstd never decodes a frame in one shot for it (tests/archive/
   test_native_open_pass_review.py has the frames 128 KiB of output did not cover).
3. A file object that cannot write, over a descriptor opened read-write: the C core wrote
   through the descriptor where the Python path's ``out.write`` fails. Refused now.

The last test is a guard that a stream cut past the probe still reaches the C core's own
cut detection (every other cut in the tests is caught by the probe first).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases
from helpers.full_disk import fill, small_tmpfs
from helpers.plain_copies import c_core_copy, outcome, same_both_ways
from helpers.zstd_blocks import BLOCK, MIB, RAW, RLE, raw_blocks, zstd_frame

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import reframe

pytestmark = pytest.mark.skipif(plain_copier() is None, reason="the C core with zstd is not built")


# -- 1. a full disk under a stream the probe refuses -----------------------------------------
@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a small tmpfs, filled: every write there fails with ENOSPC."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk)
        yield disk


def _compressible() -> bytes:
    stream = b"".join(
        tar_cases.entry(b"t/%04d.csv" % k, b"%d,%d\n" % (k, k) * 5000) for k in range(150)
    )
    return zstandard.ZstdCompressor().compress(stream + tar_cases.END)


def test_a_stream_the_probe_refuses_on_a_full_disk(tmp_path: Path, full_disk: Path) -> None:
    """The probe before the C core once wrote nothing, so the disk's error was never met.

    A stream that shrinks too well: the Python path hands each block of its probe to the
    writer thread, whose first write fails (ENOSPC); the error is raised by a later ``put``
    or when the writer is closed, whatever the timing. The C core's probe said
    ``("compressible",)``. The caller (``SeekableCache._make``) kept no copy either way; only
    the outcome (and the log line) differed. (A stream cut within the probe is left out: on
    the Python path itself, ``EOFError`` or the disk's ``OSError`` wins by timing.)
    """
    path = tmp_path / "s.tar.zst"
    path.write_bytes(_compressible())
    python = outcome(path, full_disk / "python.tar", False)
    assert python[:2] == ("error", "OSError")
    native = outcome(path, full_disk / "native.tar", True)
    assert native == python  # once ("compressible",)


# -- 2. a block over the format's maximum, in a frame with its content size -----------------
def _odd_frame_past_the_probe(block: int, window: int) -> bytes:
    """6 MiB of random member data: zstandard's frames around one hand-built frame.

    The hand-built frame (200,000 bytes of the stream at 5 MiB, past the probe) states its
    content size and is cut in raw blocks of ``block`` bytes with window descriptor
    ``window``.
    """
    data = random.Random(3).randbytes(6 * MIB)
    stream = tar_cases.header(b"big.bin", len(data)) + data + tar_cases.END
    a, b = 5 * MIB, 5 * MIB + 200_000
    cctx = zstandard.ZstdCompressor(level=1)
    mid = zstd_frame(raw_blocks(stream[a:b], block), window=window, size=b - a)
    return cctx.compress(stream[:a]) + mid + cctx.compress(stream[b:])


@pytest.mark.parametrize(
    ("block", "window"),
    [
        (BLOCK + 1, 11 << 3),  # 2 MiB window; a block may hold 128 KiB at most
        (64 << 10, 5 << 3),  # 32 KiB window; a block may hold the window at most
    ],
    ids=["block-over-128k", "block-over-the-window"],
)
def test_a_block_larger_than_the_format_allows_past_the_probe(
    tmp_path: Path, block: int, window: int
) -> None:
    """A frame libzstd once decoded in one shot for the C core (1 MiB offered), not for Python.

    ``ZSTD_decompressStream`` decodes a frame in one shot when its content size is stated
    and fits the output offered, and checks no block size there; its streaming path does.
    The Python path raises ``CorruptArchiveError("zstd data: ... Data corruption
    detected")``; the C core wrote a copy. Inside the probe both raise the probe's
    ``ZstdError``.
    """
    path = tmp_path / "odd.tar.zst"
    path.write_bytes(_odd_frame_past_the_probe(block, window))
    python = outcome(path, tmp_path / "python.tar", False)
    assert python[:2] == ("error", "CorruptArchiveError")
    native = outcome(path, tmp_path / "native.tar", True)
    assert native[:3] == python[:3]  # once ("copy", ...) from the C core


# -- 3. a file object that cannot write, over a read-write descriptor ------------------------
def test_a_read_only_file_object_over_a_read_write_descriptor(tmp_path: Path) -> None:
    """``serves()`` once asked the descriptor (O_RDWR), not the file object (``writable()``).

    Low stakes (no caller passes such an object): the C core wrote the copy through the
    descriptor; the Python path's ``out.write`` raises ``io.UnsupportedOperation`` (an
    ``OSError``).
    """
    data = random.Random(1).randbytes(100_000)
    path = tmp_path / "s.tar.zst"
    path.write_bytes(
        zstandard.ZstdCompressor().compress(tar_cases.entry(b"a.bin", data) + tar_cases.END)
    )
    results = []
    for native in (True, False):
        saved = reframe.plain_copier
        if not native:
            reframe.plain_copier = lambda: None
        src = FileSource(path)
        fd = os.open(tmp_path / f"out{int(native)}.tar", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            with os.fdopen(fd, "rb") as out:
                try:
                    found = reframe.write_plain_copy(src, src.size(), out)
                    results.append(found if found is False else found.index.names)  # type: ignore[union-attr]
                except (ArchiveError, OSError, EOFError) as exc:
                    results.append((type(exc).__name__, str(exc)))
        finally:
            reframe.plain_copier = saved
            src.close()
    assert results[1] == ("UnsupportedOperation", "write")
    assert results[0] == results[1]  # once ["a.bin"] from the C core


# -- guard: a cut past the probe reaches the C core's own cut detection ----------------------
def _ends_on_a_full_output_step(rle_blocks: int, cut: bool) -> bytes:
    """5 MiB of raw blocks, then RLE blocks whose output ends a 1-MiB output step exactly.

    The C core's last read (at 5 MiB of input) leaves 126 bytes of a raw block to decode;
    RLE blocks of 128 KiB - 126 bytes, then 128 KiB, make the rest whole mebibytes: the
    last call with output fills the buffer. ``cut``: the frame's last block is missing.
    """
    rnd = random.Random(6)
    stream = tar_cases.header(b"big.bin", 8 * MIB) + rnd.randbytes(5 * MIB - 512)
    blocks = raw_blocks(stream) + [(RLE, BLOCK - 126, b"\x00")]
    blocks += [(RLE, BLOCK, b"\x00")] * (rle_blocks - 1)
    if cut:
        return zstd_frame([*blocks, (RAW, 1, b"x")])[:-4]  # without its last block
    return zstd_frame(blocks)


@pytest.mark.parametrize(("rle_blocks", "cut"), [(8, True), (16, True), (8, False)])
def test_a_stream_past_the_probe_ending_on_a_full_output_step(
    tmp_path: Path, rle_blocks: int, cut: bool
) -> None:
    """The ``last`` hint: cut, ``CZ_TRUNCATED`` and the Python path's error; whole, a copy.

    Every other cut in the tests is caught by the Python path's probe now (their streams
    are under 4 MiB): these reach ``copy_loop``'s own judgement, with the call after the
    full step taking and giving nothing (hint 3 kept when cut; hint 0 kept, the next
    frame header's 9 ignored, when whole).
    """
    path = tmp_path / "s.tar.zst"
    path.write_bytes(_ends_on_a_full_output_step(rle_blocks, cut))
    found = c_core_copy(path, tmp_path / "c.tar")
    assert (found is None) == cut
    assert same_both_ways(path, tmp_path)[0] == ("error" if cut else "copy")
