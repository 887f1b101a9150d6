"""The supervisor of the agent's long-lived threads.

Restart with capped backoff, counted, reported, dead until it runs again; a clean return or a
join is not a death.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.agent_runs import wait_for

from cdml_edge.supervisor import Supervisor, plain_thread


def test_a_thread_that_dies_is_restarted_counted_and_reported() -> None:
    deaths: list[tuple[str, str, float]] = []
    sup = Supervisor(
        backoff_min=0.05,
        backoff_max=0.2,
        alive_after=0.1,
        on_death=lambda part, exc, delay: deaths.append((part, str(exc), delay)),
    )
    runs: list[float] = []
    stop = threading.Event()

    def loop() -> None:
        runs.append(time.monotonic())
        if len(runs) <= 3:
            raise OSError(28, "No space left on device")
        stop.wait()

    t = sup.spawn("mqtt-io", loop)
    t.start()
    wait_for(lambda: len(runs) == 4, what="the fourth run")
    assert sup.restarts == {"mqtt-io": 3}
    wait_for(lambda: sup.dead() == [], what="alive again")
    assert [d[0] for d in deaths] == ["mqtt-io"] * 3
    assert "No space left" in deaths[0][1]
    assert [d[2] for d in deaths] == [0.05, 0.1, 0.2]
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert gaps[0] >= 0.05 and gaps[2] >= 0.2
    stop.set()
    t.join(2)
    assert not t.is_alive() and sup.dead() == []
    sup.close()


def test_a_part_is_dead_from_its_death_until_it_runs_again_for_a_while() -> None:
    sup = Supervisor(backoff_min=0.5, backoff_max=0.5, alive_after=0.5)
    gate = threading.Event()
    calls = []

    def loop() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        gate.wait()

    t = sup.spawn("src-cam", loop)
    t.start()
    wait_for(lambda: sup.dead() == ["src-cam"], what="dead after the death")
    assert sup.healthy() is False
    wait_for(lambda: len(calls) == 2, what="restarted")
    assert sup.dead() == ["src-cam"]  # running again, not for alive_after yet
    wait_for(lambda: sup.dead() == [], what="alive for alive_after")
    assert sup.healthy()
    gate.set()
    t.join(2)
    sup.close()


def test_join_cancels_a_pending_restart_and_returns_soon() -> None:
    sup = Supervisor(backoff_min=30.0, backoff_max=30.0)

    def loop() -> None:
        raise RuntimeError("always")

    t = sup.spawn("windower-cam", loop)
    t.start()
    wait_for(lambda: sup.dead() == ["windower-cam"], what="dead")
    t0 = time.monotonic()
    t.join(5)
    assert time.monotonic() - t0 < 2 and not t.is_alive()
    assert sup.dead() == []  # stopped on purpose: no longer counted dead
    sup.close()


def test_a_clean_return_is_not_a_death() -> None:
    sup = Supervisor()
    t = sup.spawn("health", lambda: None)
    t.start()
    t.join(2)
    assert sup.restarts == {} and sup.dead() == []


def test_a_long_run_resets_the_backoff() -> None:
    delays: list[float] = []
    sup = Supervisor(
        backoff_min=0.05,
        backoff_max=1.0,
        stable_after=0.2,
        on_death=lambda part, exc, delay: delays.append(delay),
    )
    runs = []

    def loop() -> None:
        runs.append(1)
        if len(runs) == 3:
            time.sleep(0.3)  # ran long enough to count as stable
        if len(runs) <= 4:
            raise RuntimeError("again")
        threading.Event().wait(0.05)

    t = sup.spawn("pipeline-0", loop)
    t.start()
    wait_for(lambda: len(runs) >= 5, what="five runs")
    t.join(2)
    assert delays == [0.05, 0.1, 0.05, 0.1]
    sup.close()


def test_a_thread_that_dies_at_once_on_every_restart_stays_dead() -> None:
    sup = Supervisor(backoff_min=0.02, backoff_max=0.05, alive_after=0.5)
    seen: list[list[str]] = []

    def loop() -> None:
        raise RuntimeError("crash loop")

    t = sup.spawn("src-cam", loop)
    t.start()
    wait_for(lambda: sup.restarts.get("src-cam", 0) >= 3, what="restarts")
    for _ in range(50):
        seen.append(sup.dead())
        time.sleep(0.01)
    assert all(d == ["src-cam"] for d in seen)
    t.join(2)
    sup.close()


def _os_name(thread: object) -> str:
    inner = getattr(thread, "_thread", thread)  # a SupervisedThread wraps a Thread
    return Path(f"/proc/self/task/{inner.native_id}/comm").read_text().strip()  # type: ignore[attr-defined]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc: Linux")
def test_threads_carry_their_names_to_the_os() -> None:
    """``top -H`` and ``ps -L`` show each part by name, supervised or not (15 bytes)."""
    release = threading.Event()
    threads = [
        Supervisor().spawn("pipeline-0", release.wait),
        plain_thread("src-camera-01-long", release.wait),
    ]
    for t in threads:
        t.start()
    try:
        wanted = ["pipeline-0", "src-camera-01-l"]
        wait_for(lambda: [_os_name(t) for t in threads] == wanted, 5, "the OS thread names")
    finally:
        release.set()
        for t in threads:
            t.join(2)
