"""An agent whose broker refuses its results (a Mosquitto ACL) loses none of them.

The files are finished only once their refused results are in the spool; health and
``/metrics`` say what is refused; once the ACL allows the topic every result arrives.
"""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import cam_config, jpeg, wait_for, write_atomic
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary
from helpers.ports import free_port
from prometheus_client.parser import text_string_to_metric_families

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

pytestmark = pytest.mark.skipif(
    mosquitto_binary() is None, reason="needs Mosquitto: it refuses by its ACL"
)


def _refused_total(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "cdml_edge_mqtt_refused_total":
                return float(s.value)
    return float("nan")


def test_results_the_broker_refuses_are_kept_and_arrive_once_allowed(tmp_path: Path) -> None:
    prefix = f"a{uuid.uuid4().hex[:8]}"
    acl = tmp_path / "acl"
    refusing = f"topic read {prefix}/#\ntopic write {prefix}/#\ntopic deny {prefix}/+/cam1/result\n"
    acl.write_text(refusing)
    broker = BrokerProcess(tmp_path / "broker", acl_file=acl, unlimited_queues=False).start()
    sub = Subscriber(broker.port, f"{prefix}/#")
    metrics_port = free_port()
    cfg = cam_config(
        tmp_path,
        f"mqtt: {{url: '{broker.url}', topic_prefix: {prefix}, protocol: '5'}}\n"
        f"spool: {{dir: spool}}\n"
        f"health: {{interval: 0.2s, metrics_port: {metrics_port}, metrics_host: 127.0.0.1}}\n",
        max_items=1,
    )
    agent = Agent(load_config(cfg), cfg)
    folder = tmp_path / "in/cam1"
    try:
        agent.start()
        for n in range(3):
            write_atomic(folder / f"{n}.jpg", jpeg(60 * n))
        wait_for(lambda: not list(folder.glob("*.jpg")), what="the files finished")
        assert agent.output is not None
        assert agent.output.stats()["spool_records"] >= 3  # every refused result kept
        assert sub.ids("/result") == []
        why = agent.degraded().get("mqtt", "")
        assert "Not authorized" in why and f"{prefix}/edge-1/cam1/result" in why
        wait_for(lambda: _refused_total(metrics_port) >= 3, what="refusals on /metrics")

        acl.write_text(f"topic readwrite {prefix}/#\n")
        broker.reload()
        wait_for(lambda: len(set(sub.ids("/result"))) == 3, 30, "every result delivered")
        wait_for(lambda: "mqtt" not in agent.degraded(), 15, "health clear again")
    finally:
        agent.stop()
        sub.close()
        broker.stop()
