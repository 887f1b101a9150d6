"""Stalls are counted, not only shown while they last.

``cdml_edge_watchdog_stalled`` is a gauge: a stall that ended between two scrapes, or one that
systemd ended by restarting the agent 30 s after the pings stopped (before the 2 minutes
``CdmlEdgeStalled`` waits for), left nothing in Prometheus. ``cdml_edge_stalls_total``
counts each stall from its start (at 0 from the start: the first one is an increase). The
watchdog on a clock the test moves; the metrics scraped over real HTTP.
"""

from __future__ import annotations

import re
import urllib.request

from cdml_edge.health import Metrics, ProgressWatchdog, SdNotifier


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stalls(url: str) -> float | None:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(r"^cdml_edge_stalls_total (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


def test_each_stall_counts_once_from_its_start() -> None:
    clock = Clock()
    wd = ProgressWatchdog(SdNotifier(environ={}), stall_after_s=10, clock=clock)
    assert wd.state().stalls == 0
    wd.set_busy(2)
    clock.now += 9
    assert wd.state().stalls == 0
    clock.now += 2  # stalled: counted while it lasts ...
    assert wd.state().stalled and wd.state().stalls == 1
    wd.progress()  # ... and after it ended, once
    assert not wd.state().stalled and wd.state().stalls == 1
    clock.now += 30  # still pending, no progress: a second stall
    assert wd.state().stalls == 2
    wd.set_busy(0)  # drained: ended, still counted
    clock.now += 3600
    assert wd.state().stalls == 2 and wd.state().ok
    wd.set_busy(1)
    clock.now += 5
    wd.progress()  # work that moved in time is no stall
    assert wd.state().stalls == 2


def test_stalls_are_exported_from_0_and_a_stall_between_scrapes_shows() -> None:
    clock = Clock()
    wd = ProgressWatchdog(SdNotifier(environ={}), stall_after_s=10, clock=clock)
    metrics = Metrics(version="t", device="d")
    with metrics.serve("127.0.0.1", 0, watchdog=wd) as server:
        assert _stalls(server.url) == 0
        wd.set_busy(1)
        clock.now += 20
        wd.progress()  # the stall began and ended between two scrapes
        assert _stalls(server.url) == 1
