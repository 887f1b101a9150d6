"""The agent plugged into what factories run: Sparkplug B and Home Assistant discovery.

The whole agent (folder source, model, pipeline, publisher) against a real broker: results as
Sparkplug B DDATA read by an independent decoder, and Home Assistant entities announced at
start and withdrawn by a reload that removes their source.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import paho.mqtt.publish as publish
from helpers.agent_runs import cam_config, jpeg, wait_for, write_atomic
from helpers.mqtt_brokers import (
    Subscriber,
    broker_protocol,
    wait_until,
)
from helpers.sparkplug import SparkplugSubscriber

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def test_agent_publishes_results_as_sparkplug_b(tmp_path: Path, broker_port: int) -> None:
    group = f"a{uuid.uuid4().hex[:8]}"
    mqtt = (
        f"mqtt: {{url: 'mqtt://127.0.0.1:{broker_port}', format: sparkplug_b, "
        f"sparkplug: {{group_id: {group}}}, client_id: {group}, "
        f"protocol: '{broker_protocol()}'}}\n"
        "health: {interval: 0.3s}\n"
    )
    cfg_path = cam_config(tmp_path, mqtt)
    sub = SparkplugSubscriber(broker_port, group, persistent=False)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for i, value in enumerate((10, 120, 240)):
            write_atomic(tmp_path / f"in/cam1/{i}.jpg", jpeg(value))
        wait_for(lambda: len(sub.result_ids()) >= 3, what="3 results as DDATA")
        wait_for(lambda: not list((tmp_path / "in/cam1").glob("*.jpg")), what="on_done")
        wait_for(lambda: any(r.kind == "NDATA" for r in sub.decoded()), what="health NDATA")
    finally:
        agent.stop()
    wait_for(lambda: sub.decoded()[-1].kind == "NDEATH", 5, what="NDEATH")
    got = sub.decoded()
    sub.close()
    assert [r.kind for r in got[:2]] == ["NBIRTH", "DBIRTH"]
    assert got[1].topic.device_id == "cam1"
    results = [r.metrics() for r in got if r.kind == "DDATA" and "result/id" in r.metrics()]
    assert {m["result/item"] for m in results} == {"0.jpg", "1.jpg", "2.jpg"}
    assert all(isinstance(m["result/label"], str) for m in results)
    windows = [r.metrics() for r in got if r.kind == "DDATA" and "window/items" in r.metrics()]
    assert sum(int(m["window/items"]) for m in windows) == 3
    assert got[-1].payload.bd_seq_metric.value == got[0].metrics()["bdSeq"]


def _ha_config(tmp_path: Path, port: int, tag: str, sources: list[str]) -> Path:
    lines = ["device: {id: edge-1}", "sources:"]
    for s in sources:
        (tmp_path / "in" / s).mkdir(parents=True, exist_ok=True)
        lines.append(f"  - {{name: {s}, kind: folder, path: in/{s}, modality: image}}")
    lines += [
        "models:",
        "  image: {path: brightness.onnx}",
        f"mqtt: {{url: 'mqtt://127.0.0.1:{port}', topic_prefix: p{tag}, client_id: ha{tag},",
        f"       discovery: homeassistant, discovery_prefix: ha{tag},",
        f"       protocol: '{broker_protocol()}'}}",
    ]
    path = tmp_path / "factory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _retained(port: int, topic: str, expect: int) -> set[str]:
    """The topics kept retained (not empty) under ``topic``, once ``expect`` came (or 5 s)."""
    sub = Subscriber(port, topic, persistent=False)
    try:
        wait_until(lambda: len(sub.messages) >= expect, 5)
        time.sleep(0.3)  # and none more
        return {t for t, p, retained in sub.messages if retained and p}
    finally:
        sub.close()


def test_agent_reload_withdraws_the_entities_of_a_removed_source(
    tmp_path: Path, broker_port: int
) -> None:
    tag = uuid.uuid4().hex[:8]
    cam_config(tmp_path, "")  # writes the brightness model beside the config
    cfg_path = _ha_config(tmp_path, broker_port, tag, ["cam1", "cam2"])
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        ledger = tmp_path / "factory.state" / "discovery.json"
        wait_for(lambda: ledger.exists(), what="the discovery ledger")
        # announced at start, spooled until the connection is up: the broker has them soon
        assert wait_until(lambda: len(_retained(broker_port, f"ha{tag}/#", 11)) == 11, 10)
        _ha_config(tmp_path, broker_port, tag, ["cam1"])
        assert agent.reload()
        wait_for(lambda: len(json.loads(ledger.read_text())["topics"]) == 6, what="ledger")
        assert wait_until(lambda: len(_retained(broker_port, f"ha{tag}/#", 6)) == 6, 10)
        left = _retained(broker_port, f"ha{tag}/#", 6)
    finally:
        agent.stop()
    assert len(left) == 6 and not any("cam2" in t for t in left)
    assert any(t.endswith("/cam1_label/config") for t in left)
    clear = [(t, b"", 1, True) for t in [*left, f"p{tag}/edge-1/status"]]
    publish.multiple(clear, hostname="127.0.0.1", port=broker_port)
