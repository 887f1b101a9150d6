"""The C core's members pass at the open of a tar.zst without a seek table (a review).

``ZstdTarArchive._scan_members`` takes the members of ``native_copy.walked_members`` when
the C core's walk reached a clean end; the promise is the pure-Python open's result (rows,
names, or error type and message) for every input, and nothing that hangs. The cases where
it was not:

1. libzstd decodes a frame in one shot when its stated content size fits the output
   offered (128 KiB) AND the whole frame lies in the input it is given; the one-shot path
   checks neither the window limit (``Frame requires too much memory``) nor a block larger
   than the window (``Data corruption detected``). The C core gave libzstd 1 MiB of input
   a call, so every small frame that fits was decoded in one shot. The Python path's
   ``FrameStream`` gives it a frame header and at most 8 blocks a call (``_BlockWalk``), or
   512-byte chunks once the walk is lost (after a skippable frame): a frame of more than 8
   blocks, or any frame after a skippable one, goes the streaming way and is refused. So
   the C walk opened the archive where Python raises ``CorruptArchiveError``; the same
   inputs past the probe differed in ``write_plain_copy`` too. The C core now gives each
   frame's first byte alone: libzstd never decodes a frame in one shot for it.
2. The Python walk stops reading at the end-of-archive block; the C core's walk decoded
   every frame up to ``source.size()`` first. Zstd frames after the end marker that decode
   to tens of GiB (4-byte RLE blocks: 32 GiB per MiB of file) cost the C open seconds to
   minutes of CPU where the Python open takes milliseconds. The walk alone now ends where
   the walk ends.

The guards after them are what held.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import zstandard
from helpers import tar_cases
from helpers.plain_copies import opened, outcome, same_open_both_ways
from helpers.zstd_blocks import BLOCK, MIB, RLE, raw_blocks, zstd_frame

from cdml_edge.archive import open_archive
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import native_copy, zst

pytestmark = pytest.mark.skipif(plain_copier() is None, reason="the C core with zstd is not built")

SKIPPABLE = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"hello"
WINDOW_1K = 0  # window descriptor: 1 KiB (the smallest)
WINDOW_2G = 21 << 3  # window descriptor: 2 GiB (over libzstd's default limit of 128 MiB)


def _small_stream() -> bytes:
    stream, _ = tar_cases.member_stream(3)  # 5,120 bytes, end marker included
    return stream


def _odd_frame(case: str, stream: bytes) -> bytes:
    """``stream`` as one frame stating its size, which only libzstd's one-shot path takes."""
    n = len(stream)
    return {
        # blocks of 4 KiB in a 1 KiB window, after a skippable frame (Python: 512-byte feeds)
        "skippable, blocks over the window": SKIPPABLE
        + zstd_frame(raw_blocks(stream, 4096), window=WINDOW_1K, size=n),
        # 10+ blocks of 2 KiB in a 1 KiB window (Python: 8 blocks, then the rest)
        "more than 8 blocks over the window": zstd_frame(
            raw_blocks(stream + bytes(20480 - n), 2048), window=WINDOW_1K, size=20480
        ),
        # a valid frame: 10 blocks of 512 bytes, a 2 GiB window (Python: streaming, refused)
        "2 GiB window, 10 blocks": zstd_frame(raw_blocks(stream, 512), window=WINDOW_2G, size=n),
        # the same in one block, after a skippable frame
        "skippable, 2 GiB window, 1 block": SKIPPABLE
        + zstd_frame(raw_blocks(stream, BLOCK), window=WINDOW_2G, size=n),
    }[case]


def _refused_as(case: str) -> str:
    """How the Python open refuses ``case`` (the C core's walk must say the same).

    A valid frame needing a 2 GiB window is unsupported (libzstd allows 128 MiB); blocks
    over the window are corrupt.
    """
    return "UnsupportedArchiveError" if "2 GiB window" in case else "CorruptArchiveError"


ODD = [
    "skippable, blocks over the window",
    "more than 8 blocks over the window",
    "2 GiB window, 10 blocks",
    "skippable, 2 GiB window, 1 block",
]


# -- 1. frames libzstd takes in one shot for the C core, not for the Python walk -------------
@pytest.mark.parametrize("case", ODD)
def test_open_a_frame_only_the_one_shot_decoder_takes(tmp_path: Path, case: str) -> None:
    """The C walk once opened it (3 members); the Python open raises ``CorruptArchiveError``.

    Python: ``zstd data: zstd decompressor error: Data corruption detected`` (blocks over the
    window), or ``UnsupportedArchiveError`` for the 2 GiB window (``zstd frame needs a window
    of 2 GiB; the reader allows at most 128 MiB``).
    """
    path = tmp_path / "odd.tar.zst"
    path.write_bytes(_odd_frame(case, _small_stream()))
    python = opened(path, False)
    assert python[:2] == ("error", _refused_as(case))
    native = opened(path, True)
    assert native == python  # once ("open", rows of 3 members, names)


@pytest.mark.parametrize("case", ["2 GiB window, 10 blocks", "more than 8 blocks over the window"])
def test_plain_copy_of_a_one_shot_frame_past_the_probe(tmp_path: Path, case: str) -> None:
    """The same frames past the 4 MiB probe: the C core once wrote a copy, Python raises.

    Review 2's case 2 (stated size 200,000 > 128 KiB) was closed by offering 128 KiB of
    output; a stated size under 128 KiB still went one shot in the C core (whole frame in
    its 1 MiB input), never in ``FrameStream`` (header + 8 blocks a call).
    """
    data = random.Random(3).randbytes(6 * MIB)
    stream = tar_cases.header(b"big.bin", len(data)) + data + tar_cases.END
    a, b = 5 * MIB, 5 * MIB + 20_480
    cctx = zstandard.ZstdCompressor(level=1)
    mid = _odd_frame(case, stream[a:b])
    path = tmp_path / "odd.tar.zst"
    path.write_bytes(cctx.compress(stream[:a]) + mid + cctx.compress(stream[b:]))
    python = outcome(path, tmp_path / "python.tar", False)
    assert python[:2] == ("error", _refused_as(case))
    native = outcome(path, tmp_path / "native.tar", True)
    assert native[:3] == python[:3]  # once ("copy", ...)


# -- 2. the C open decodes everything after the end marker -----------------------------------
def test_open_does_not_decode_tens_of_gib_after_the_end_marker(tmp_path: Path) -> None:
    """64 GiB of zeros in RLE blocks after the archive (a 2 MiB file).

    The Python open stops at the end marker (milliseconds); the C core's walk once decoded
    the whole trailing frame before it answered (about 5 s here at ~14 GB/s; 32 TiB from a
    1 GiB file). Its walk alone now stops where the walk stops: it decodes no more than
    the step holding the end marker.
    """
    from cdml_edge.archive._native._reader import ffi, lib

    tail = zstd_frame([(RLE, BLOCK, b"\x00")] * (64 * 8192))
    path = tmp_path / "tail.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_small_stream()) + tail)
    python = opened(path, False)
    assert opened(path, True) == python and python[0] == "open"
    found = ffi.new("cz_tar_walk **")
    with open(path, "rb") as fh:
        status = lib.cz_tar_plain_copy(fh.fileno(), path.stat().st_size, -1, 0, 0.0, 0, found)
    try:
        walk = found[0]
        assert status == lib.CZ_OK and walk.at_end
        assert walk.stream_bytes <= 4 << 20  # once 64 GiB
        assert walk.compressed_read < path.stat().st_size
    finally:
        lib.cz_tar_walk_free(found[0])


# -- guards: what held ------------------------------------------------------------------------
def _sk(n: int) -> bytes:
    return b"\x50\x2a\x4d\x18" + n.to_bytes(4, "little") + b"s" * n


@pytest.mark.parametrize(
    "tail",
    [b"", _sk(0), _sk(5), _sk(5)[:-2], b"\x00junk", b"\x28\xb5\x2f", bytes(100)],
    ids=["none", "empty skippable", "skippable", "cut skippable", "junk", "cut magic", "zeros"],
)
@pytest.mark.parametrize("body", ["end", "no end", "zero block, then members", "dir only"])
def test_endings_and_trailing_bytes_agree(tmp_path: Path, body: str, tail: bytes) -> None:
    stream = _small_stream()
    no_end = stream[: -len(tar_cases.END)]
    tar = {
        "end": stream,
        "no end": no_end,
        "zero block, then members": no_end
        + bytes(512)
        + tar_cases.entry(b"after", b"x" * 3)
        + tar_cases.END,
        "dir only": tar_cases.header(b"d/", 0, b"5"),
    }[body]
    path = tmp_path / "e.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(tar) + tail)
    same_open_both_ways(path)


def test_a_seek_table_without_index_is_walked_by_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    real = native_copy.walked_members
    monkeypatch.setattr(native_copy, "walked_members", lambda *a: calls.append(a) or real(*a))
    path = tmp_path / "s.tar.zst"
    path.write_bytes(tar_cases.seekable_tar_zst(_small_stream(), 1000))
    assert same_open_both_ways(path)[0] == "open"
    assert calls == []


def test_cache_and_no_cache_agree(tmp_path: Path) -> None:
    """Without a cache, with one (made, then reused), and the Python walk: same members."""
    text = b"".join(
        tar_cases.entry(b"t/%04d.csv" % k, b"%d,%d\n" % (k, k) * 50) for k in range(200)
    )
    rnd = random.Random(1)
    raw = b"".join(tar_cases.entry(b"r/%04d.bin" % k, rnd.randbytes(3000)) for k in range(50))
    for stream in (text + tar_cases.END, text, raw + tar_cases.END):
        path = tmp_path / "c.tar.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(stream))
        cache = tmp_path / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        seen = []
        for mode in ("none", "made", "reused", "python"):
            saved = zst.plain_copier
            if mode == "python":
                zst.plain_copier = lambda: None  # type: ignore[assignment]
            try:
                sc = SeekableCache(cache) if mode in ("made", "reused") else None
                archive = open_archive(str(path), seekable_cache=sc)
                seen.append([(n, archive.read(n)) for n in archive.names()])
                archive.close()
            finally:
                zst.plain_copier = saved
        assert all(s == seen[0] for s in seen)
    src = FileSource(path)
    try:
        assert native_copy.walked_members(src, src.size()) is not None
    finally:
        src.close()
