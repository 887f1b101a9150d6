"""The output's gauges and counters on ``/metrics`` tell what the MQTT output is doing.

A real agent, a real Mosquitto (or a port where nothing listens), scraped over HTTP.
"""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from helpers.agent_runs import jpeg, wait_for, write_atomic, write_config
from helpers.ports import free_port
from prometheus_client.parser import text_string_to_metric_families

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(port: int, name: str, **labels: str) -> float:
    return _scrape(port).get((name, tuple(sorted(labels.items()))), float("nan"))


def _mqtt_agent(
    tmp_path: Path, broker_port: int, spool: dict[str, str] | None = None
) -> tuple[Agent, int]:
    port = free_port()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"].update(metrics_port=port, metrics_host="127.0.0.1")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    # its own client id: agents of other tests on the shared broker are "test-dev" too
    doc["mqtt"] = {
        "url": f"mqtt://127.0.0.1:{broker_port}",
        "topic_prefix": prefix,
        "client_id": prefix,
    }
    doc["spool"] = {"dir": "spool", **(spool or {})}
    doc["output"] = {"jsonl": None}
    cfg_path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    return agent, port


@pytest.mark.broker
def test_connected_and_published_while_the_broker_is_there(tmp_path: Path, models: Path) -> None:
    agent, port = _mqtt_agent(tmp_path, 1883)
    try:
        wait_for(lambda: _value(port, "cdml_edge_broker_connected") == 1.0, what="connected")
        for n in range(3):
            write_atomic(tmp_path / "in/cam" / f"{n}.jpg", jpeg(40 * n))
        # three results and at least one window message, each acknowledged by the broker
        wait_for(
            lambda: _value(port, "cdml_edge_mqtt_published_total", kind="live") >= 4,
            what="messages acknowledged, counted",
        )
        assert _value(port, "cdml_edge_spool_records") == 0.0
    finally:
        agent.stop()


def test_disconnected_and_spooling_while_the_broker_is_gone(tmp_path: Path, models: Path) -> None:
    agent, port = _mqtt_agent(tmp_path, free_port())  # nothing listens there
    try:
        for n in range(3):
            write_atomic(tmp_path / "in/cam" / f"{n}.jpg", jpeg(40 * n))
        wait_for(lambda: _value(port, "cdml_edge_spool_records") >= 4, what="spooled, counted")
        assert _value(port, "cdml_edge_spool_bytes") > 0
        assert _value(port, "cdml_edge_broker_connected") == 0.0
    finally:
        agent.stop()


def test_messages_the_full_spool_dropped_are_counted(tmp_path: Path, models: Path) -> None:
    agent, port = _mqtt_agent(tmp_path, free_port(), spool={"max_bytes": "3KiB"})
    try:
        for n in range(12):
            write_atomic(tmp_path / "in/cam" / f"{n}.jpg", jpeg(20 * n))
        wait_for(
            lambda: _value(port, "cdml_edge_dropped_total", reason="spool") > 0,
            what="the spool's drops counted",
        )
    finally:
        agent.stop()
