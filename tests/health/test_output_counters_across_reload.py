"""The output's counters go on across a reload that makes a new output.

``cdml_edge_mqtt_published_total``, ``_refused_total``, ``_connects_total`` and
``_connect_failures_total`` are read from the output's statistics at scrape time. A reload
that changes the output's settings (here ``mqtt.keepalive``) builds a new output, whose
statistics start at 0: the counters went back within one run, which Prometheus reads as a
restart of the process that never happened (and a ``changes()`` or ``resets()`` rule as
one). They now carry the old output's totals over.

A real agent publishing to the real Mosquitto, its metrics from its own registry.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml
from helpers.agent_runs import jpeg, wait_for, write_atomic, write_config

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _sample(agent: Agent, name: str, **labels: str) -> float:
    for family in agent.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"{name}{labels} not exported")


def _config(tmp_path: Path, keepalive: str) -> Path:
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"] = doc["sources"][:1]
    prefix = f"r{uuid.uuid4().hex[:8]}"
    doc["mqtt"] = {"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix, "keepalive": keepalive}
    doc["spool"] = {"dir": "spool"}
    doc.pop("output", None)
    cfg_path.write_text(yaml.safe_dump(doc))
    return cfg_path


def test_the_output_counters_go_on_when_a_reload_makes_a_new_output(
    tmp_path: Path, models: Path
) -> None:
    cfg_path = _config(tmp_path, "30s")
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        cam = tmp_path / "in/cam"
        for i in range(3):
            write_atomic(cam / f"{i}.jpg", jpeg(30 + 40 * i))
        published = "cdml_edge_mqtt_published_total"
        wait_for(lambda: _sample(agent, published, kind="live") >= 3, what="3 results acked")
        before = {
            "published": _sample(agent, published, kind="live"),
            "connects": _sample(agent, "cdml_edge_mqtt_connects_total"),
        }
        old_output = agent.output
        doc = yaml.safe_load(cfg_path.read_text())
        doc["mqtt"]["keepalive"] = "20s"  # an output setting: a new output
        cfg_path.write_text(yaml.safe_dump(doc))
        assert agent.reload()
        assert agent.output is not old_output
        after = {
            "published": _sample(agent, published, kind="live"),
            "connects": _sample(agent, "cdml_edge_mqtt_connects_total"),
        }
        assert after["published"] >= before["published"], (before, after)
        assert after["connects"] >= before["connects"], (before, after)
    finally:
        agent.stop()
