"""The global in-flight byte budget.

A :class:`ByteBudget` shared by every source caps the bytes held in memory between intake
and the output: sources ask it before reading a file or keeping a frame; above the cap
intake pauses (files stay on disk, camera frames are skipped and counted).
"""

from __future__ import annotations

import threading


class ByteBudget:
    """A global cap on bytes in flight (read from disk or captured, not yet emitted).

    What an item is charged (:meth:`cost`) is what its window really holds in memory, not
    only the item's bytes: ``data_factor`` copies of the data (the item, the packed archive,
    the members read back from it) plus a per-modality ``item_extra`` (the decoded model
    input, its row of the batch, the result records), set once the models are loaded.

    Full policy: :meth:`try_acquire` refuses when the cap would be exceeded, so the caller
    leaves the file on disk (retried later) or skips the frame. One item larger than the
    whole cap is still admitted when nothing else is in flight, so it cannot block forever.
    """

    def __init__(self, max_bytes: int, *, data_factor: int = 1) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_inflight_bytes must be > 0 (got {max_bytes})")
        if data_factor < 1:
            raise ValueError(f"data_factor must be >= 1 (got {data_factor})")
        self.max_bytes = max_bytes
        self.data_factor = data_factor
        self.item_extra: dict[str, int] = {}
        self._used = 0
        self._peak = 0
        self._refused = 0
        self._lock = threading.Lock()

    def largest_file(self, modality: str, cap: int | None = None) -> int:
        """The largest file of ``modality`` the budget can be charged for, at most ``cap``."""
        fits = (self.max_bytes - self.item_extra.get(modality, 0)) // self.data_factor
        return max(0, fits if cap is None else min(fits, cap))

    def cost(self, nbytes: int, modality: str) -> int:
        """Budget bytes one item of ``nbytes`` and ``modality`` holds until its window is done."""
        return nbytes * self.data_factor + self.item_extra.get(modality, 0)

    def try_acquire(self, n: int) -> bool:
        """Take ``n`` bytes; ``False`` (counted in :attr:`refused`) when over the cap."""
        with self._lock:
            if self._used + n > self.max_bytes and self._used > 0:
                self._refused += 1
                return False
            self._used += n
            self._peak = max(self._peak, self._used)
            return True

    def take(self, n: int) -> None:
        """Take ``n`` bytes even over the cap (a decode under way): intake pauses meanwhile."""
        with self._lock:
            self._used += n
            self._peak = max(self._peak, self._used)

    def release(self, n: int) -> None:
        """Give ``n`` bytes back (never below 0)."""
        with self._lock:
            self._used = max(0, self._used - n)

    @property
    def used(self) -> int:
        """Bytes in flight now."""
        return self._used

    @property
    def peak(self) -> int:
        """Most bytes ever in flight at once."""
        return self._peak

    @property
    def refused(self) -> int:
        """How many :meth:`try_acquire` calls were refused."""
        return self._refused
