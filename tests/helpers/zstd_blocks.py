"""zstd frames built by hand, block by block (raw, RLE, reserved), for the decoders' edge cases.

Where a decoder judges a frame (its window, its blocks, its stated size) must not depend on
what a compressor chooses, so these frames are written field by field (RFC 8878).
"""

from __future__ import annotations

MIB = 1 << 20
BLOCK = 128 << 10  # zstd's largest block
RAW, RLE, RESERVED = 0, 1, 3


def zstd_frame(
    blocks: list[tuple[int, int, bytes]], *, window: int = 13 << 3, size: int = -1
) -> bytes:
    """One zstd frame of ``(type, size, payload)`` blocks, no checksum.

    ``window``: the window descriptor (8 MiB by default); ``size``: the content size the
    header states (4 bytes), none when negative.
    """
    if size < 0:
        out = bytearray(b"\x28\xb5\x2f\xfd\x00" + bytes([window]))
    else:
        out = bytearray(b"\x28\xb5\x2f\xfd\x80" + bytes([window]) + size.to_bytes(4, "little"))
    for k, (kind, n, payload) in enumerate(blocks):
        last = k == len(blocks) - 1
        out += (int(last) | kind << 1 | n << 3).to_bytes(3, "little") + payload
    return bytes(out)


def raw_blocks(data: bytes, block: int = BLOCK) -> list[tuple[int, int, bytes]]:
    """``data`` as raw (stored) blocks of ``block`` bytes: it costs its own size."""
    parts = [data[i : i + block] for i in range(0, len(data), block)]
    return [(RAW, len(part), part) for part in parts]


def zeros_as_rle(stream: bytes) -> bytes:
    """``stream`` as one frame of 128-KiB blocks: RLE where a block is all zeros, else raw."""
    blocks = []
    for i in range(0, len(stream), BLOCK):
        chunk = stream[i : i + BLOCK]
        zero = chunk.count(0) == len(chunk)
        blocks.append((RLE, len(chunk), b"\x00") if zero else (RAW, len(chunk), chunk))
    return zstd_frame(blocks)
