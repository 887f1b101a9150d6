"""Inputs on which the C core's plain copy once differed from the Python path (a review).

Each case gave another result with the C core than with the pure-Python path, or made the
C core decline an input it serves: the compression ratio judged at another point of the
stream, output files that do not read back what was written, sizes far past the end of the
stream, a stream ending on a 1-MiB boundary. The zstd frames are built by hand (raw and RLE
blocks) so that where the ratio is judged does not depend on the compressor's choices.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from helpers import tar_cases
from helpers.plain_copies import c_core_copy, same_both_ways, same_open_both_ways
from helpers.zstd_blocks import BLOCK, MIB, RESERVED, RLE, raw_blocks, zeros_as_rle, zstd_frame

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import reframe

pytestmark = pytest.mark.skipif(plain_copier() is None, reason="the C core with zstd is not built")


def _one_member(random_before: int, zeros: int, random_after: int) -> bytes:
    """A tar.zst of one member: random bytes, zeros, random bytes (then the end marker).

    The zeros start at ``random_before + 512`` of the stream: a block boundary when that is
    a multiple of 128 KiB.
    """
    rnd = random.Random(5)
    size = random_before + zeros + random_after
    data = rnd.randbytes(random_before) + bytes(zeros) + rnd.randbytes(random_after)
    stream = tar_cases.header(b"big.bin", size) + data + bytes(-size % 512) + tar_cases.END
    return zeros_as_rle(stream)


# -- 1. the compression ratio judged at another point of the stream ------------------------
# The Python path judges PLAIN_PROBE_BYTES (4 MiB) of tar stream exactly, against the zstd
# bytes its decoder was fed by then; the C core once judged at the end of the first 1-MiB
# output step that reached 4 MiB (anywhere in [4, 5) MiB), against the bytes libzstd
# consumed (now the Python path's own probe judges before the C core copies). A
# stream whose ratio changes between the two points gets two answers.
@pytest.mark.parametrize(
    ("random_before", "zeros", "random_after", "python_says"),
    [
        # 3 MiB random, 1 MiB zeros, 2 MiB random: at 4 MiB, 4 / 3 = 1.33 (Python:
        # compressible); C judges at ~5 MiB, 5 / 4 = 1.2499 (not above 1.25), and the whole
        # stream is 6 / 5 = 1.2: C writes the copy
        (3 * MIB - 512, 1 * MIB, 2 * MIB, "compressible"),
        # 3.5 MiB random, 1.5 MiB zeros, 4 MiB random: at 4 MiB, 4 / 3.5 = 1.14 (Python: a
        # copy, the whole is 9 / 7.5 = 1.2); C judges at ~5 MiB, 5 / 3.5 = 1.43: compressible
        (7 * MIB // 2 - 512, 3 * MIB // 2, 4 * MIB, "copy"),
    ],
)
def test_the_probe_ratio_is_judged_where_the_python_path_judges_it(
    tmp_path: Path, random_before: int, zeros: int, random_after: int, python_says: str
) -> None:
    path = tmp_path / "probe.tar.zst"
    path.write_bytes(_one_member(random_before, zeros, random_after))
    assert same_both_ways(path, tmp_path)[0] == python_says  # the C core: the other answer, once
    same_open_both_ways(path)  # and the pass at open


def test_a_corrupt_block_just_past_the_probe_is_the_python_paths_error(tmp_path: Path) -> None:
    """All zeros (compressible), a reserved block at 4.13 MiB of stream.

    The Python path's decoder is fed whole blocks, 8 at a time: the feed that completes the
    4-MiB probe reaches the bad block, and it raises ``ZstdError``. The C core once stopped
    decoding when its output reached 4 MiB, judged the stream compressible and returned
    ``False``.
    """
    blocks = [(RLE, 1000, b"\x00")] + [(RLE, BLOCK, b"\x00")] * 33 + [(RESERVED, 0, b"")]
    blocks += [(RLE, BLOCK, b"\x00")] * 10
    path = tmp_path / "bad-block.tar.zst"
    path.write_bytes(zstd_frame(blocks))
    assert same_both_ways(path, tmp_path)[0] == "error"  # the C core once said ("compressible",)
    same_open_both_ways(path)  # and the pass at open


# -- 2. the output file: the C path walks the copy back from disk, the Python path does not --
def _stream_with_a_link() -> bytes:
    """Three members the C core walks, a symlink it leaves to Python, one more member."""
    lead, _ = tar_cases.member_stream(3)
    rest = tar_cases.entry(b"lnk", b"", b"2", link=b"x") + tar_cases.entry(b"after.txt", b"z" * 600)
    return lead[: -len(tar_cases.END)] + rest + tar_cases.END


def _both_into(
    path: Path, opener: Callable[[], BinaryIO], end: int | None = None
) -> tuple[Any, Any]:
    """write_plain_copy's members and skipped entries, C core then Python path.

    ``end``: where the zstd data ends (the file's size by default).
    """
    found = []
    for native in (True, False):
        saved = reframe.plain_copier
        if not native:
            reframe.plain_copier = lambda: None  # type: ignore[assignment]
        src = FileSource(path)
        try:
            with opener() as out:
                try:
                    rows = reframe.write_plain_copy(src, src.size() if end is None else end, out)
                    found.append(rows if rows is False else (rows.index.names, rows.skipped))  # type: ignore[union-attr]
                except (ArchiveError, OSError, EOFError, OverflowError) as exc:
                    found.append((type(exc).__name__, str(exc)))
        finally:
            reframe.plain_copier = saved
            src.close()
    return found[0], found[1]


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_an_output_that_does_not_read_back_what_was_written(tmp_path: Path) -> None:
    """``/dev/null`` opened ``r+b``: O_RDWR at offset 0, which the C core once served.

    The C core walked the three members, then the Python walk over the "copy" read nothing
    back: the symlink and ``after.txt`` were lost (C: 3 members, no skipped entries; Python:
    4 members and the symlink skipped). Only an empty regular file is served now.
    """
    path = tmp_path / "s.tar.zst"
    path.write_bytes(zstd_frame(raw_blocks(_stream_with_a_link())))
    native, python = _both_into(path, lambda: open(os.devnull, "r+b"))  # noqa: SIM115
    assert native == python


def test_an_output_file_with_old_bytes_after_the_stream(tmp_path: Path) -> None:
    """``out`` opened ``r+b`` over an older, longer file (offset 0, once served).

    The stream has no end marker; the Python path ends at the end of the stream, the C
    path's walk read on past it into the old bytes and found a member that is not there.
    """
    lead, _ = tar_cases.member_stream(3)
    stream = lead[: -len(tar_cases.END)]  # ends cleanly at a header boundary
    path = tmp_path / "s.tar.zst"
    path.write_bytes(zstd_frame(raw_blocks(stream)))
    old = tmp_path / "old.tar"

    def reused() -> BinaryIO:
        old.write_bytes(bytes(len(stream)) + tar_cases.entry(b"ghost", b"g") + tar_cases.END)
        return open(old, "r+b")

    native, python = _both_into(path, reused)
    assert native == python  # the C core once found a member "ghost" too


def test_a_negative_end_is_the_python_paths_error(tmp_path: Path) -> None:
    """Low stakes (callers pass ``source.size()``): cffi refuses a negative ``uint64_t``.

    The C path raised ``OverflowError`` from the call; the Python path: an empty stream
    (``CorruptArchiveError``).
    """
    path = tmp_path / "s.tar.zst"
    path.write_bytes(zstd_frame(raw_blocks(_stream_with_a_link())))
    native, python = _both_into(path, lambda: open(tmp_path / "o.tar", "w+b"), end=-1)  # noqa: SIM115
    assert native == python and python[0] == "CorruptArchiveError"


# -- 3. a valid stream the C core declined (same results, by the Python path) --------------
def test_a_stream_of_whole_mebibytes_is_served_by_the_c_core(tmp_path: Path) -> None:
    """A valid 1-MiB tar stream: the last decode fills the 1-MiB output buffer exactly.

    ``copy_loop`` then calls ``ZSTD_decompressStream`` once more with no input; at a frame
    boundary libzstd answers with a non-zero hint (the next frame header's size). That hint
    was once kept, and the end of the input taken for a frame cut short (``CZ_TRUNCATED``):
    the C core handed the whole copy to Python. No wrong result, but any stock archive whose
    stream ends on a 1-MiB boundary (GNU tar's 10-KiB records make that every 5 MiB) lost
    the C path.
    """
    rnd = random.Random(2)
    body = rnd.randbytes(850_000)
    size = MIB - 512 - 1024
    stream = tar_cases.header(b"m.bin", size) + body + bytes(size - len(body)) + tar_cases.END
    assert len(stream) == MIB
    path = tmp_path / "mib.tar.zst"  # whole input in one read; ratio 1 MiB / ~0.88 < 1.25
    path.write_bytes(zeros_as_rle(stream))
    assert same_both_ways(path, tmp_path)[0] == "copy"
    same_open_both_ways(path)  # and the pass at open
    found = c_core_copy(path, tmp_path / "c.tar")
    assert found is not None  # once None (CZ_TRUNCATED for a complete frame)


# -- 4. the Python walk over the copy: offsets past what os.pread takes ---------------------
def _huge_member(after_stream_at: int | None = None, size: int = 1 << 70) -> bytes:
    """Two members the C core walks, then one with a base-256 size (left to Python).

    ``after_stream_at``: the size is chosen so that the member ends at that stream offset.
    """
    lead, _ = tar_cases.member_stream(2)
    lead = lead[: -len(tar_cases.END)]
    if after_stream_at is not None:
        size = after_stream_at - len(lead) - 512
    field = b"\x80" + size.to_bytes(11, "big")
    return zeros_as_rle(
        lead + tar_cases.header(b"huge.bin", 0, fields={124: field}) + tar_cases.END
    )


@pytest.mark.parametrize(
    ("size", "ends_at"),
    [
        (1 << 70, None),  # was OverflowError (os.pread's offset is a C long)
        (None, (1 << 63) - 4096),  # was OSError EINVAL (offset + 64 KiB overflowed)
    ],
)
def test_a_member_that_runs_far_past_the_end(
    tmp_path: Path, size: int | None, ends_at: int | None
) -> None:
    """A base-256 size that takes the walk far past the end: the Python path's copy.

    The Python path skips past the end of its stream (``_TeeStream.skip``: nothing left
    to read) and lists the member. The C path's walk over the copy once called ``os.pread``
    at that offset: ``OverflowError`` past 2**63 (which ``write_plain_copy``'s callers do not
    catch: ``SeekableCache._make`` catches OSError, ArchiveError, EOFError, ZstdError),
    ``OSError`` just below it. A pax ``size`` record of 20 digits did the same.
    """
    path = tmp_path / "huge.tar.zst"
    path.write_bytes(_huge_member(ends_at, size or 0))
    assert same_both_ways(path, tmp_path)[0] == "copy"
    same_open_both_ways(path)  # and the pass at open


def test_a_pax_size_far_past_the_end(tmp_path: Path) -> None:
    lead, _ = tar_cases.member_stream(2)
    pax = tar_cases.pax(tar_cases.pax_record(b"size", b"9" * 23))
    stream = lead[: -len(tar_cases.END)] + pax + tar_cases.header(b"huge.bin", 0) + tar_cases.END
    path = tmp_path / "pax.tar.zst"
    path.write_bytes(zeros_as_rle(stream))
    assert same_both_ways(path, tmp_path)[0] == "copy"  # was OverflowError
    same_open_both_ways(path)  # and the pass at open
