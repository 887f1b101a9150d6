"""The decoded-frame cache of one tar.zst archive: least recently used, bounded by bytes.

Neighbouring ``read()`` calls (members that share a frame) are served from it without
decoding the frame again. Full policy: the least recently used frames are dropped until the
new one fits; a frame larger than a quarter of the bound is never kept, so one big frame
cannot flush the others. Thread-safe; a forked child starts from the parent's copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: default bound of the cache of each open tar.zst archive
FRAME_CACHE_BYTES = 1 << 20


class FrameCache:
    """Decoded frames by frame number, at most ``max_bytes`` of them in all."""

    def __init__(self, max_bytes: int = FRAME_CACHE_BYTES) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self._frames: OrderedDict[int, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def wants(self, size: int) -> bool:
        """Whether a decoded frame of ``size`` bytes would be kept."""
        return 0 < size <= self.max_bytes // 4

    def get(self, k: int) -> bytes | None:
        """Frame ``k`` if held (then most recently used), else ``None``; counts hits/misses."""
        data = self._frames.get(k)  # one dict lookup: a miss takes no lock
        if data is None:
            self.misses += 1  # statistics: a lost count under threads is harmless
            return None
        with self._lock:
            if k in self._frames:
                self._frames.move_to_end(k)
            self.hits += 1
        return data

    def put(self, k: int, data: bytes) -> None:
        """Keep frame ``k`` if :meth:`wants` it, dropping least recently used frames to fit."""
        if not self.wants(len(data)):
            return
        with self._lock:
            old = self._frames.pop(k, None)
            if old is not None:
                self._bytes -= len(old)
            while self._frames and self._bytes + len(data) > self.max_bytes:
                self._bytes -= len(self._frames.popitem(last=False)[1])
            self._frames[k] = data
            self._bytes += len(data)

    @property
    def size(self) -> int:
        """Bytes held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def clear(self) -> None:
        """Drop every frame (the hit and miss counts stay)."""
        with self._lock:
            self._frames.clear()
            self._bytes = 0
