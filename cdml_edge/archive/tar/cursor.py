"""Where the last streaming read of a tar.zst without a seek table stopped.

A tar.zst of one zstd frame (``tar --zstd``) read without a seekable copy decompresses
from the start of the frame for each read. Reads in archive order (``shuffle=False``, an
export, ``read`` member after member) would so cost the square of the archive: a read at
or after where the last one stopped continues there instead. One cursor is kept per
archive, holding the frame's decompression window, and only when that window is at most
:data:`KEPT_WINDOW_MAX` (``zstd`` levels 1-19 write 8 MiB or less; ``--long`` 128 MiB):
a larger one is dropped after each read. A thread that finds the cursor in use, or a read
before it, starts a stream of its own from the start, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import zstandard

from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar.stream import ExactReader, FrameStream

#: the largest decompression window a cursor keeps between reads
KEPT_WINDOW_MAX = 8 << 20


class StreamCursor:
    """A decompressed stream positioned at :attr:`pos` (an offset in the tar)."""

    def __init__(self, source: ByteSource, end: int) -> None:
        self.stream = FrameStream(source, end)
        self.reader = ExactReader(self.stream)
        self.pos = 0

    def seek(self, offset: int) -> None:
        """Move forward to ``offset`` (at or after :attr:`pos`); ``EOFError`` past the end."""
        self.reader.skip(offset - self.pos)
        self.pos = offset

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes (short only at the end of the stream)."""
        data = self.reader.read(n)
        self.pos += len(data)
        return data


class CursorSlot:
    """At most one :class:`StreamCursor` kept between the reads of one archive."""

    def __init__(self, source: ByteSource, end: int) -> None:
        self._source = source
        self._end = end
        self._lock = threading.Lock()
        self._kept: StreamCursor | None = None
        self._small_window: bool | None = None
        self._dropped = False  # closed: nothing is kept any more

    @property
    def held(self) -> bool:
        """Whether a cursor (and its decompression window) is kept now."""
        return self._kept is not None

    @contextmanager
    def at(self, offset: int) -> Iterator[StreamCursor]:
        """A cursor at or before ``offset``; kept afterwards unless the block raised."""
        if not self._lock.acquire(blocking=False):  # in use (or locked across a fork)
            yield StreamCursor(self._source, self._end)
            return
        try:
            cur, self._kept = self._kept, None
            if cur is None or cur.pos > offset:
                cur = StreamCursor(self._source, self._end)
            yield cur
            if self._keeps():
                self._kept = cur
                if self._dropped:  # closed meanwhile (another thread): its drop may have run
                    self._kept = None
        finally:
            self._lock.release()

    def drop(self) -> None:
        """Forget the kept cursor (its memory goes with it), and keep none from now on."""
        self._dropped = True
        self._kept = None

    def _keeps(self) -> bool:
        if self._small_window is None:
            try:
                params = zstandard.get_frame_parameters(self._source.pread(0, 18))
                self._small_window = 0 < params.window_size <= KEPT_WINDOW_MAX
            except (zstandard.ZstdError, OSError, ValueError):
                self._small_window = False
        return self._small_window
