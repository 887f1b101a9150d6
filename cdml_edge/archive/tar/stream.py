"""Sequential reads over a :class:`~cdml_edge.archive.source.ByteSource` for the tar scanners.

:class:`FrameStream` decompresses concatenated zstd frames with bounded steps,
:class:`ExactReader` turns any stream into exact reads and skips, :class:`PreadScanner`
walks a plain tar with buffered positional reads.
"""

from __future__ import annotations

import io
from typing import Any

import zstandard

from cdml_edge.archive.source import ByteSource

CHUNK = 1 << 16


class SourceStream(io.RawIOBase):
    """A sequential, read-only file over a :class:`ByteSource` (positional reads)."""

    def __init__(self, source: ByteSource, end: int | None = None) -> None:
        self._source = source
        self._pos = 0
        self._end = source.size() if end is None else end

    def readable(self) -> bool:
        """Always ``True``."""
        return True

    def readinto(self, b: Any) -> int:
        """Fill ``b`` from the current position (one ``pread``); 0 at the end."""
        n = min(len(b), self._end - self._pos)
        if n <= 0:
            return 0
        data = self._source.pread(self._pos, n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


class FrameStream:
    """Sequential decompression of concatenated zstd (and skippable) frames.

    Unlike ``stream_reader``, a stream cut inside a frame raises ``EOFError``. Input is fed
    in 512-byte chunks: ``decompress`` has no output bound and a 4-byte RLE block yields
    128 KiB, so one step expands to at most 16 MiB (an 8 KiB step could reach 256 MiB).
    Small feeds cost no measurable speed: decoding dominates. The frames passed are
    recorded (:meth:`table`): where each ends, compressed and decompressed.
    """

    FEED = 512

    def __init__(self, source: ByteSource, end: int) -> None:
        # buffered: each 512-byte feed must not be a request of its own (one ranged GET on
        # S3); the source reads ahead in its part size when it has one
        ahead = max(CHUNK, int(getattr(source, "part_bytes", CHUNK)))
        self._src = io.BufferedReader(SourceStream(source, end), buffer_size=ahead)
        self._dctx = zstandard.ZstdDecompressor()
        self._obj: Any = None
        self._fed = False
        self._pending = b""
        self._buf = bytearray()
        self._in = 0  # compressed bytes taken from the source
        self._out = 0  # decompressed bytes produced
        self._ends: list[tuple[int, int]] = []  # (compressed, decompressed) end of each frame

    def read(self, n: int) -> bytes:
        """The next ``n`` decompressed bytes (short at the end); ``EOFError`` mid-frame."""
        while len(self._buf) < n:
            if self._obj is None or self._obj.eof:
                if self._obj is not None:
                    self._end_frame()
                self._obj = self._dctx.decompressobj()
                self._fed = False
            if not self._feed():
                if self._fed:
                    raise EOFError
                break
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    @property
    def compressed_read(self) -> int:
        """Compressed bytes taken from the source so far."""
        return self._in

    def _feed(self) -> bool:
        """Give the frame under way its next input; ``False`` at the end of the stream."""
        data = self._pending
        if not data:
            data = self._src.read(self.FEED)
            self._in += len(data)
        self._pending = b""
        if not data:
            return False
        self._fed = True
        got = self._obj.decompress(data)
        self._out += len(got)
        self._buf += got
        return True

    def _end_frame(self) -> None:
        self._pending = self._obj.unused_data + self._pending
        self._ends.append((self._in - len(self._pending), self._out))
        self._obj = None

    def table(self) -> tuple[list[int], list[int]]:
        """Start offsets (compressed, decompressed) of the frames read so far, plus their end.

        The frame under way is decoded to its end first (its output is dropped), so that
        it is included; ``EOFError`` when the stream ends inside it.
        """
        while self._obj is not None and self._fed and not self._obj.eof:
            self._buf.clear()
            if not self._feed():
                raise EOFError
        if self._obj is not None and self._obj.eof:
            self._end_frame()
        return [0] + [c for c, _ in self._ends], [0] + [d for _, d in self._ends]


class ExactReader:
    """Exact reads and skips over a stream (``read(n)`` is short only at the end)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes (short only at the end of the stream)."""
        parts = []
        while n > 0:
            chunk = self._stream.read(n)
            if not chunk:
                break
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def skip(self, n: int) -> None:
        """Pass over ``n`` bytes (read in 1 MiB steps); ``EOFError`` if the stream ends."""
        while n > 0:
            chunk = self._stream.read(min(n, 1 << 20))
            if not chunk:
                raise EOFError
            n -= len(chunk)


class PreadScanner:
    """Reads of a plain tar on a source: small reads are buffered, skips jump."""

    def __init__(self, source: ByteSource) -> None:
        self._source = source
        self._pos = 0
        self._buf = b""
        self._buf_at = 0

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes (short at the end), from a buffer of at least 64 KiB."""
        rel = self._pos - self._buf_at
        if rel < 0 or rel + n > len(self._buf):
            self._buf = self._source.pread(self._pos, max(n, CHUNK))
            self._buf_at = self._pos
            rel = 0
        out = self._buf[rel : rel + n]
        self._pos += len(out)
        return out

    def skip(self, n: int) -> None:
        """Move ``n`` bytes on without reading."""
        self._pos += n
