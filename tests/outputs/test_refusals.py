"""The pause of the spool's drain after a refusal, and what health says meanwhile."""

from __future__ import annotations

from cdml_edge.outputs.mqtt.refusals import Refusals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_refusal_pauses_the_drain_and_later_ones_of_a_round_do_not_extend_it() -> None:
    clock = Clock()
    r = Refusals(first=4.0, cap=16.0, quiet_s=60.0, clock=clock)
    assert r.may_retry()
    r.refused("p/d/cam1/result", "Not authorized", "kept")
    assert not r.may_retry()
    clock.now += 1.0
    r.refused("p/d/cam1/result", "Not authorized", "kept")  # the same round
    clock.now += 3.1  # at most 4 s after the first (jitter: 2-4 s)
    assert r.may_retry()
    r.refused("p/d/cam1/result", "Not authorized", "kept")  # the retry, refused again
    clock.now += 3.9  # the second pause is 4-8 s
    assert not r.may_retry()
    clock.now += 4.2
    assert r.may_retry()


def test_health_names_refused_topics_until_each_is_accepted() -> None:
    clock = Clock()
    r = Refusals(first=1.0, cap=2.0, quiet_s=60.0, clock=clock)
    assert r.degraded is None
    r.refused("p/d/cam1/result", "Not authorized", "kept")
    r.refused("p/d/vib/result", "Quota exceeded", "kept")
    why = r.degraded
    assert why is not None
    assert "Not authorized on p/d/cam1/result" in why and "Quota exceeded on p/d/vib/result" in why
    r.accepted("p/d/cam1/window")  # another topic: nothing changes
    assert r.degraded == why
    r.accepted("p/d/cam1/result")
    assert r.degraded is not None and "cam1" not in r.degraded
    r.accepted("p/d/vib/result")
    assert r.degraded is None


def test_health_clears_once_quiet_after_the_retry_was_due() -> None:
    """The refused messages may have left the spool (dropped when full): no accept comes."""
    clock = Clock()
    r = Refusals(first=100.0, cap=100.0, quiet_s=10.0, clock=clock)
    r.refused("p/d/cam1/result", "Not authorized", "kept")
    clock.now += 30.0  # quiet, but the retry (50-100 s) is not due yet
    assert r.degraded is not None
    clock.now += 71.0
    assert r.degraded is None
