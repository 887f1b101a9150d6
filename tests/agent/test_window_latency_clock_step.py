"""A step back of the wall clock leaves the window latency histogram a counter.

The window's close time and the moment its results are durable are both read from the wall
clock (``window.closed_ts`` is the time written in its manifest). When the clock is stepped
back between the two (NTP after a boot without an RTC, an operator's ``date -s``), the
latency came out negative: ``cdml_edge_window_latency_seconds_sum`` went down, which
Prometheus reads as a counter reset (a rate() spike), and the sample fell in the lowest
bucket. Now it is clamped at 0, as the item latency is.

A real agent scoring real files into a real JSON-lines file, its metrics over real HTTP; only
the clock the pipeline reads when a window is durable is stepped back an hour.
"""

from __future__ import annotations

import re
import time
import types
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers.agent_runs import jpeg, wait_for, write_atomic, write_config
from helpers.ports import free_port

import cdml_edge.agent.pipeline as pipeline
from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

STEP_S = 3600.0


def _latency(port: int) -> tuple[float, float]:
    """``cdml_edge_window_latency_seconds``: (_count, _sum) of source ``cam``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()

    def sample(suffix: str) -> float:
        pattern = rf'^cdml_edge_window_latency_seconds_{suffix}{{source="cam"}} (\S+)$'
        m = re.search(pattern, text, re.M)
        return 0.0 if m is None else float(m.group(1))

    return sample("count"), sample("sum")


def test_a_wall_clock_stepped_back_gives_no_negative_window_latency(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"].update(metrics_port=port, metrics_host="127.0.0.1")
    cfg_path.write_text(yaml.safe_dump(doc))
    stepped = types.SimpleNamespace(time=lambda: time.time() - STEP_S, monotonic=time.monotonic)
    monkeypatch.setattr(pipeline, "time", stepped)  # the clock read once a window is durable
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for i in range(3):
            write_atomic(tmp_path / f"in/cam/{i}.jpg", jpeg(40 + 60 * i))
            wait_for(lambda n=i: _latency(port)[0] > n, timeout=20, what=f"window {i} durable")
        count, total = _latency(port)
    finally:
        agent.stop()
    assert count >= 3
    assert total >= 0.0, f"the histogram's _sum went down to {total}"
