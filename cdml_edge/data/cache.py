"""A byte-bounded LRU of raw member bytes (no torch).

The bound is the sum of ``len(value)`` over cached members — the real payload bytes,
not ``sys.getsizeof``. Full policy: inserting evicts least-recently-used members until
the new one fits; a member larger than the whole capacity is not cached. Each process
has its own cache (DataLoader workers each hold up to ``capacity`` bytes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheInfo:
    """Counters of one process's cache."""

    hits: int
    misses: int
    evictions: int
    items: int
    bytes: int
    capacity: int


class ByteLRU:
    """Least-recently-used ``name -> bytes`` cache bounded by ``capacity`` bytes (0 disables)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity = int(capacity)
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    @classmethod
    def from_mb(cls, size_mb: float) -> ByteLRU:
        """A cache of ``size_mb`` MiB."""
        return cls(int(size_mb * 1024 * 1024))

    def get(self, key: str) -> bytes | None:
        """The cached bytes (now most recently used), or ``None``; counts a hit or a miss."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: bytes) -> bool:
        """Cache ``value``; returns whether it was kept (it must fit in ``capacity``)."""
        size = len(value)
        if size > self.capacity:
            return False
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            while self._data and self._bytes + size > self.capacity:
                _, evicted = self._data.popitem(last=False)
                self._bytes -= len(evicted)
                self.evictions += 1
            self._data[key] = value
            self._bytes += size
            return True

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        """Bytes cached (the sum of the values' lengths)."""
        return self._bytes

    def clear(self) -> None:
        """Drop every member (the counters stay)."""
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def info(self) -> CacheInfo:
        """The counters, taken together under the lock."""
        with self._lock:
            return CacheInfo(
                self.hits, self.misses, self.evictions, len(self._data), self._bytes, self.capacity
            )
