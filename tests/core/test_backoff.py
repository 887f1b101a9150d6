"""One backoff rule for every retry loop (supervisor, MQTT, cameras, S3).

Doubling, capped, the jitter a parameter.
"""

from __future__ import annotations

import random

import pytest

from cdml_edge.archive.s3.client import RetryPolicy
from cdml_edge.backoff import Backoff, backoff_delay


def test_delays_double_from_first_and_stop_at_the_cap() -> None:
    assert [backoff_delay(n, 0.5, 4.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff_delay(10_000, 1.0, 30.0) == 30.0  # no overflow on a long outage


def test_a_backoff_counts_failures_and_resets_on_success() -> None:
    b = Backoff(0.5, 4.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [("none", 8.0, 8.0), ("equal", 4.0, 8.0), ("full", 0.0, 8.0), ("spread", 6.4, 9.6)],
)
def test_each_jitter_mode_stays_in_its_range(jitter: str, low: float, high: float) -> None:
    rng = random.Random(1)
    got = [backoff_delay(3, 1.0, 30.0, jitter, 0.2, rng.random) for _ in range(2000)]  # type: ignore[arg-type]
    assert low <= min(got) and max(got) <= high
    if jitter != "none":
        assert max(got) - min(got) > (high - low) / 2  # it really spreads


def test_spread_jitter_is_plus_minus_and_never_above_the_cap() -> None:
    assert backoff_delay(0, 1.0, 30.0, "spread", 0.2, lambda: 1.0) == pytest.approx(1.2)
    assert backoff_delay(0, 1.0, 30.0, "spread", 0.2, lambda: 0.0) == pytest.approx(0.8)
    capped = Backoff(1.0, 2.0, "spread", 0.5, lambda: 1.0)
    assert max(capped.next() for _ in range(5)) == 2.0


def test_s3_retries_use_full_jitter_below_their_cap() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=0.4)
    delays = [policy.delay(5) for _ in range(500)]
    assert 0.0 <= min(delays) < 0.1 and max(delays) <= 0.4
