"""Messages the JSON-lines output cannot write are a metric, not only an internal stat.

A result batch the file refuses is counted in ``errors{stage="output"}`` and written again
later; health, status and error-event batches were counted only in the output's ``failed``
stat, which no metric exported: on a full disk under ``output.jsonl`` Prometheus saw nothing
but ``cdml_edge_degraded{part="jsonl"}`` while it lasted. Now
``cdml_edge_output_messages_failed_total`` counts every message not written.

A real agent with its ``output.jsonl`` on a real full disk (a small tmpfs, filled; where
mounting is refused, a link to ``/dev/full``), its metrics over real HTTP.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.agent_runs import wait_for, write_config
from helpers.full_disk import fill, small_tmpfs
from helpers.ports import free_port

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.health import Metrics
from cdml_edge.outputs.factory import leaves
from cdml_edge.outputs.jsonl import JsonlOutput

FAILED = "cdml_edge_output_messages_failed_total"


def _sample(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


def _jsonl_failed(agent: Agent) -> int:
    return sum(o.stats()["failed"] for o in leaves(agent.output) if isinstance(o, JsonlOutput))


@pytest.fixture(params=["tmpfs", "dev_full"])
def full_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where ``output.jsonl`` goes: a folder whose disk the test fills (``disk/full()``)."""
    if request.param == "dev_full":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full")
        yield tmp_path / "disk"
        return
    with small_tmpfs(tmp_path / "disk", "256k", "; the /dev/full variant covers it") as disk:
        yield disk


def _fill(disk: Path) -> None:
    """Every write to ``disk/out.jsonl`` fails with ENOSPC from now on."""
    if disk.is_mount():
        fill(disk)
    else:
        (disk / "out.jsonl").unlink()
        (disk / "out.jsonl").symlink_to("/dev/full")


def test_health_batches_on_a_full_disk_are_counted_in_a_metric(
    tmp_path: Path, models: Path, full_disk: Path
) -> None:
    port = free_port()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"].update(metrics_port=port, metrics_host="127.0.0.1")
    doc["output"] = {"jsonl": str(full_disk / "out.jsonl")}
    cfg_path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        assert _sample(port, FAILED) == 0  # there from the start: the first one is an increase
        _fill(full_disk)
        wait_for(lambda: _jsonl_failed(agent) >= 3, timeout=20, what="3 health messages refused")
        refused = _jsonl_failed(agent)
        exported = _sample(port, FAILED)
        output_errors = _sample(port, 'cdml_edge_errors_total{stage="output"}')
    finally:
        agent.stop()
    assert exported is not None and exported >= refused
    assert output_errors == 0  # no result was refused: this metric alone shows the loss


class _Output:
    """An output's stats, as a reload that makes a new output sees them (pure logic)."""

    def __init__(self, failed: int) -> None:
        self.failed = failed

    def stats(self) -> dict[str, int]:
        return {"failed": self.failed}


def _exported(metrics: Metrics) -> float:
    text = metrics.exposition().decode()
    m = re.search(rf"^{FAILED} (\S+)$", text, re.M)
    assert m is not None, text
    return float(m.group(1))


def test_the_counter_goes_on_when_a_reload_makes_a_new_output() -> None:
    metrics = Metrics(version="t", device="d")
    assert _exported(metrics) == 0
    old = _Output(5)
    metrics.attach_output(old.stats)
    assert _exported(metrics) == 5
    old.failed = 7  # refused after the last scrape, before the reload
    metrics.attach_output(old.stats)  # a reload that kept the output: nothing carried twice
    assert _exported(metrics) == 7
    new = _Output(0)
    metrics.attach_output(new.stats)  # a reload that made a new one, at 0
    assert _exported(metrics) == 7
    new.failed = 2
    assert _exported(metrics) == 9
