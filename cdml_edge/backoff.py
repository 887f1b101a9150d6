"""One backoff rule for every retry: capped exponential delays, the jitter a parameter.

Attempt ``n`` (0, 1, 2, ...) waits ``first * 2**n``, capped at ``cap``, then jittered:

- ``"none"``: exactly that (the supervisor's thread restarts);
- ``"equal"``: uniform in ``[d/2, d]`` (MQTT reconnects: never sooner than half);
- ``"full"``: uniform in ``[0, d]`` (S3 request retries, as AWS recommends);
- ``"spread"``: ``d * (1 ± spread)``, still capped (cameras rebooting together do not retry
  in step).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

Jitter = Literal["none", "equal", "full", "spread"]


def backoff_delay(
    attempt: int,
    first: float,
    cap: float,
    jitter: Jitter = "none",
    spread: float = 0.2,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry ``attempt`` (0-based), see the module's rules."""
    cap = max(first, cap)
    d = float(min(cap, first * 2 ** min(max(attempt, 0), 30)))
    if jitter == "none":
        return d
    if jitter == "equal":
        return d / 2 + rand() * d / 2
    if jitter == "full":
        return rand() * d
    return float(min(cap, d * (1 + spread * (2 * rand() - 1))))


class Backoff:
    """The delays of one retry loop: :meth:`next` for each failure, :meth:`reset` on success."""

    def __init__(
        self,
        first: float,
        cap: float,
        jitter: Jitter = "none",
        spread: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.first, self.cap = first, max(first, cap)
        self.jitter, self.spread, self._rand = jitter, spread, rand
        self.attempt = 0

    def next(self) -> float:
        """The delay before the next try; counts one more failure."""
        delay = backoff_delay(
            self.attempt, self.first, self.cap, self.jitter, self.spread, self._rand
        )
        self.attempt += 1
        return delay

    def reset(self) -> None:
        """Back to the first delay (after a success)."""
        self.attempt = 0


__all__ = ["Backoff", "Jitter", "backoff_delay"]
