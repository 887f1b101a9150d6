"""``FrameStream``: whole zstd blocks per decompression step, small chunks where it cannot."""

from __future__ import annotations

import os

import pytest
import zstandard

from cdml_edge.archive.source import MemorySource
from cdml_edge.archive.tar.stream import FrameStream

SKIPPABLE = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"notes"


def _read_all(data: bytes, walk: bool = True, step: int = 1 << 16) -> tuple[bytes, int, object]:
    """The stream's output, the most it held decoded at once, and its table."""
    stream = FrameStream(MemorySource(data), len(data))
    if not walk:
        stream._walk = None
    out, held = bytearray(), 0
    while chunk := stream.read(step):
        out += chunk
        held = max(held, len(stream._buf) + len(chunk))
    return bytes(out), held, stream.table()


def _frames(parts: list[bytes], **kw: object) -> list[bytes]:
    return [zstandard.ZstdCompressor(**kw).compress(p) for p in parts]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw", [{}, {"write_checksum": True}, {"write_content_size": False}, {"level": 19}]
)
def test_whole_blocks_give_what_small_chunks_give(kw: dict[str, object]) -> None:
    parts = [os.urandom(300_000), b"text " * 200_000, os.urandom(5), b""]
    data = b"".join(_frames(parts, **kw))
    walked, held, table = _read_all(data)
    assert walked == b"".join(parts)
    assert (walked, table) == _read_all(data, walk=False)[::2]
    assert held <= (1 << 20) + (1 << 16)  # 8 blocks of 128 KiB at most, plus one read


def test_a_skippable_frame_falls_back_to_small_chunks() -> None:
    parts = [b"a" * 400_000, os.urandom(200_000), b"b" * 1000]
    frames = _frames(parts, write_checksum=True)
    data = frames[0] + SKIPPABLE + frames[1] + SKIPPABLE + frames[2]
    stream = FrameStream(MemorySource(data), len(data))
    assert stream.read(600_000 + 1000) == b"".join(parts)
    assert stream._walk is None  # the walk stopped at the skippable frame
    assert _read_all(data)[::2] == _read_all(data, walk=False)[::2]


def test_a_stream_cut_inside_a_block_is_an_eof_error() -> None:
    data = _frames([os.urandom(500_000)])[0]
    for cut in (len(data) - 2, 200_000, 5):
        stream = FrameStream(MemorySource(data[:cut]), cut)
        with pytest.raises(EOFError):
            while stream.read(1 << 16):
                pass


def test_rle_blocks_decode_a_step_of_one_mib_at_most() -> None:
    """4-byte blocks of 128 KiB each: 8 per step, 1 MiB decoded at a time."""
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # no content size, 128 KiB window
    block = 128 << 10
    for _ in range(63):
        frame += ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"a"
    frame += ((block << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"b"
    out, held, _ = _read_all(bytes(frame), step=4096)
    assert out == b"a" * (63 * block) + b"b" * block
    assert held <= (1 << 20) + 4096
