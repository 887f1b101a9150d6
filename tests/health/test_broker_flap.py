"""A broker that goes away and comes back: the metrics count it, not only the gauge.

``cdml_edge_broker_connected`` is a gauge read at scrape time: a broker lost and back between
two scrapes (15 s apart by default) leaves it at 1 both times, and a broker that refuses every
attempt looks the same as one that is merely slow. The real ``cdml-edge run`` process, a real
Mosquitto of the test's own that is stopped and started again on the same port.
"""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.agent_runs import start_agent, wait_for
from helpers.models import brightness_classifier
from helpers.mqtt_brokers import BrokerProcess, mosquitto_binary
from helpers.ports import free_port


def _metrics(url: str) -> str:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


def _sample(metrics: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.M)
    return None if m is None else float(m.group(1))


def _value(url: str, name: str) -> float:
    got = _sample(_metrics(url), name)
    return -1.0 if got is None else got


@pytest.fixture
def broker_and_agent(tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker of the test's own and an agent publishing to it: the broker, the agent's URL."""
    if mosquitto_binary() is None:
        pytest.skip("needs Mosquitto (a broker restarted on its port)")
    broker = BrokerProcess(tmp_path / "broker").start()
    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "in/cam").mkdir(parents=True)
    port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        "device: {id: flap}\n"
        "sources:\n  - {name: cam, path: in/cam, modality: image}\n"
        "models: {image: {path: b.onnx}}\n"
        f'mqtt: {{url: "{broker.url}", client_id: flap-{port}, protocol: "5"}}\n'
        f"state_dir: {tmp_path / 'state'}\n"
        f"health: {{interval: 0.3s, watchdog: false, metrics_port: {port}}}\n"
    )
    log = tmp_path / "agent.log"
    proc: subprocess.Popen[bytes] = start_agent(cfg, log)
    try:
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        yield broker, f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        broker.stop()


def test_a_broker_lost_and_back_is_counted(
    broker_and_agent: tuple[BrokerProcess, str],
) -> None:
    broker, url = broker_and_agent
    connected = "cdml_edge_broker_connected"
    wait_for(lambda: _value(url, connected) == 1, timeout=20, what="connected")
    assert _value(url, "cdml_edge_mqtt_connects_total") == 1
    assert _value(url, "cdml_edge_mqtt_connect_failures_total") == 0
    broker.stop()
    wait_for(lambda: _value(url, connected) == 0, timeout=20, what="disconnected")
    wait_for(
        lambda: _value(url, "cdml_edge_mqtt_connect_failures_total") >= 1,
        timeout=20,
        what="a failed attempt counted",
    )
    broker.start()
    wait_for(lambda: _value(url, connected) == 1, timeout=30, what="connected again")
    assert _value(url, "cdml_edge_mqtt_connects_total") == 2
