"""How far apart two ranges may be and still share one ``GET``: learnt from the requests.

A request costs its latency before the first byte and then its bytes at the link's
bandwidth. Two ranges ``gap`` bytes apart are cheaper as one request when the gap takes
less time to transfer than a second request's latency: the bandwidth-delay product.
:class:`RequestPace` keeps moving averages of the latency (small ``GET``s) and the
bandwidth (large ones) of one source and turns them into that gap, never below the
configured ``gap`` and never above ``max_request``. On a store where the per-request cost
dominates (a far region, a busy server) batches of small members coalesce into a few
``GET``s; on a fast link with low latency they stay as precise as ``gap`` says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

SMALL_BODY = 256 << 10  # a GET at most this long (or a HEAD) measures latency
LARGE_BODY = 1 << 20  # a GET at least this long measures bandwidth
_WEIGHT = 0.3  # of the newest sample in the moving averages
#: bandwidth assumed until a large GET measured it (an index cache hit fetches none)
ASSUMED_BANDWIDTH = 100e6


@dataclass
class RequestPace:
    """Moving averages of request latency (seconds) and bandwidth (bytes per second)."""

    latency: float | None = None
    bandwidth: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def observe(self, nbytes: int, seconds: float) -> None:
        """Account one successful ``GET`` of ``nbytes`` body bytes that took ``seconds``.

        A ``HEAD`` counts as 0 bytes.
        """
        with self.lock:
            if nbytes <= SMALL_BODY:
                self.latency = _mix(self.latency, seconds)
            elif nbytes >= LARGE_BODY and self.latency is not None:
                # the transfer part of the time; a store whose time does not grow with the
                # bytes (a loopback server) gets a very high bandwidth, bounded by 5% of it
                transfer = max(seconds - self.latency, seconds * 0.05, 1e-6)
                self.bandwidth = _mix(self.bandwidth, nbytes / transfer)

    def measured(self) -> tuple[float | None, float | None]:
        """``(latency, bandwidth)`` as measured so far (kept with a cached index)."""
        with self.lock:
            return self.latency, self.bandwidth

    def seed(self, latency: float | None, bandwidth: float | None) -> None:
        """Start from earlier measurements (a cached index's); a value measured here wins."""
        with self.lock:
            if latency is not None and bandwidth is not None:
                self.latency = _mix(latency, self.latency) if self.latency else latency
                self.bandwidth = self.bandwidth or bandwidth

    def gap(self, floor: int, ceiling: int) -> int:
        """The gap worth one request: latency x bandwidth, within ``[floor, ceiling]``."""
        with self.lock:
            lat, bw = self.latency, self.bandwidth
        if lat is None:
            return floor
        return int(min(ceiling, max(floor, lat * (bw or ASSUMED_BANDWIDTH))))

    def __getstate__(self) -> dict[str, float | None]:
        return {"latency": self.latency, "bandwidth": self.bandwidth}

    def __setstate__(self, state: dict[str, float | None]) -> None:
        self.latency, self.bandwidth = state["latency"], state["bandwidth"]
        self.lock = threading.Lock()


def _mix(old: float | None, new: float) -> float:
    return new if old is None else (1 - _WEIGHT) * old + _WEIGHT * new
