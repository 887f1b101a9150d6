"""Seekable tar.zst writing: a tar stream cut into independent zstd frames, then the index.

Layout (see :mod:`.seekable`): frames of at most ``frame_bytes`` of tar stream, each starting
at a member's header; a member that would not fit in what is left of a frame starts the
next one, so a member never straddles two frames unless it is larger than a frame on its
own (then it has frames to itself, cut every :data:`MAX_FRAME_BYTES`). Then the member index
and the seek table as skippable frames. ``zstd -dc f | tar -t`` lists it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import BinaryIO

import zstandard

from cdml_edge.archive.spec import WriteOptions
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar import seekable

FRAME_BYTES = 16 << 10  # most tar stream in a frame (see docs/archive.md: chosen by measurement)
MAX_FRAME_BYTES = 1 << 20  # large members are cut into frames of this size


class FrameWriter:
    """Collects tar-stream bytes and emits independent zstd frames."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self._out = out
        self._cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._buf: list[bytes] = []
        self._buffered = 0
        self.sizes: list[tuple[int, int]] = []  # (compressed, decompressed) of each frame
        self.position = 0  # bytes of tar stream written or buffered

    def add(self, data: bytes) -> None:
        """Buffer ``data`` for the current frame."""
        self._buf.append(data)
        self._buffered += len(data)
        self.position += len(data)

    @property
    def buffered(self) -> int:
        """Bytes buffered for the current frame."""
        return self._buffered

    @property
    def frame(self) -> int:
        """Index of the frame the next byte goes to."""
        return len(self.sizes)

    def flush(self) -> None:
        """Compress what is buffered into one frame (nothing when the buffer is empty)."""
        if not self._buffered:
            return
        block = b"".join(self._buf)
        packed = self._cctx.compress(block)
        self._out.write(packed)
        self.sizes.append((len(packed), len(block)))
        self._buf, self._buffered = [], 0


def write_tar_zst(out: BinaryIO, items: Sequence[tuple[str, bytes]], options: WriteOptions) -> None:
    """Write ``items`` as a seekable tar.zst to ``out``.

    zstd at ``options.level``, frames of about ``options.frame_bytes``, a CRC-32 per member
    in the index.
    """
    mtime, frame_bytes = options.mtime, options.frame_bytes
    w = FrameWriter(out, options.level)
    records: list[tuple[str, int, int, int, float, int, int, int]] = []
    for name, data in items:
        header = tarfmt.build_header(name, len(data), mtime)
        if w.buffered and w.buffered + len(header) + tarfmt.padded(len(data)) > frame_bytes:
            w.flush()  # the member would not fit: it starts the next frame
        header_off = w.position
        w.add(header)
        data_off = w.position
        first = w.frame
        view = memoryview(data)
        for start in range(0, len(data), MAX_FRAME_BYTES):
            if w.buffered >= MAX_FRAME_BYTES:
                w.flush()
            w.add(bytes(view[start : start + MAX_FRAME_BYTES]))
        last = w.frame
        w.add(b"\x00" * (tarfmt.padded(len(data)) - len(data)))
        records.append(
            (name, header_off, data_off, len(data), mtime, zlib.crc32(data), first, last)
        )
    w.add(tarfmt.END_OF_ARCHIVE)
    w.flush()
    index = seekable.index_frame(records)
    out.write(index)
    # the index is a frame of the file like any other: its seek-table entry says so
    out.write(seekable.seek_table_frame([*w.sizes, (len(index), 0)]))
