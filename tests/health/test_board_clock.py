"""The activity board (status page, ``cdml-edge tail``) over a long run and a clock jump.

The board's rate counts results over the last ``RATE_WINDOW_S``. It must stay bounded when
nobody looks at the page for weeks, and tell the truth when the wall clock is stepped (NTP
after a boot without a real-time clock, an operator's ``date -s``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from cdml_edge.health import Metrics, healthz_body
from cdml_edge.health.board import RATE_WINDOW_S, ActivityBoard


class Clock:
    """A clock the test moves by hand: ``now`` seconds."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _result(i: int) -> dict[str, Any]:
    return {"item": f"{i}.jpg", "label": "ok", "score": 0.5, "latency_ms": 3.0, "ts": 0.0}


def test_the_rate_keeps_a_bounded_history_when_nobody_looks() -> None:
    """A day at 10 results/s with the page never opened holds ~RATE_WINDOW_S of history."""
    steady = Clock(100.0)
    board = ActivityBoard("d", clock=steady)
    for i in range(86_400 * 10 // 100):  # every 100th result of a day at 10/s is enough
        steady.now += 10.0
        board.observe("result", "cam", _result(i))
    assert len(board.sources["cam"].arrivals) <= RATE_WINDOW_S + 1


def test_a_wall_clock_stepped_back_does_not_freeze_the_rate() -> None:
    """An hour back: the rate still falls to 0 once results stop for ``RATE_WINDOW_S``."""
    wall, steady = Clock(1.7e9), Clock(100.0)
    board = ActivityBoard("d", clock=steady, wall=wall)
    for i in range(30):
        board.observe("result", "cam", _result(i))
        wall.now += 0.1
        steady.now += 0.1
    assert board.snapshot()["sources"]["cam"]["rate_per_s"] > 0
    wall.now -= 3600.0  # the clock is stepped back; the results stop
    wall.now += 2 * RATE_WINDOW_S
    steady.now += 2 * RATE_WINDOW_S
    snap = board.snapshot()
    assert snap["sources"]["cam"]["rate_per_s"] == 0.0
    assert snap["last_message_age_s"] >= 2 * RATE_WINDOW_S
    assert snap["ts"] == wall.now


def test_a_wall_clock_stepped_forward_does_not_empty_the_rate() -> None:
    """A day forward in the middle of a busy second: the last results still count."""
    wall, steady = Clock(1.7e9), Clock(100.0)
    board = ActivityBoard("d", clock=steady, wall=wall)
    for i in range(20):
        board.observe("result", "cam", _result(i))
    wall.now += 86_400.0
    steady.now += 1.0
    assert board.snapshot()["sources"]["cam"]["rate_per_s"] == round(20 / RATE_WINDOW_S, 3)


def test_uptime_is_not_moved_by_a_clock_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``/healthz`` and the health message's ``uptime_s`` count time run, not the clock."""
    metrics = Metrics(version="t", device="d")
    stepped = time.time() - 3600.0  # the wall clock is stepped an hour back
    monkeypatch.setattr(time, "time", lambda: stepped)
    _, body = healthz_body(metrics, None)
    assert 0 <= body["uptime_s"] < 60
    assert 0 <= metrics.totals()["uptime_s"] < 60
