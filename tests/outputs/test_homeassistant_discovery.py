"""Home Assistant MQTT discovery against a real broker.

A subscriber on the discovery prefix reads the retained configs: each has the keys the
Home Assistant MQTT discovery schema requires of its component, its availability is the
agent's retained status topic (whose ``offline`` is the Last Will), its state topic carries
what its template reads, and a source gone from the configuration has its configs removed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import paho.mqtt.publish as publish
from helpers.mqtt_brokers import (
    Subscriber,
    broker_protocol,
    wait_until,
)

from cdml_edge.config import AppConfig, parse_config
from cdml_edge.outputs.homeassistant import announce, discovery_configs, ledger_path
from cdml_edge.outputs.mqtt.publisher import MqttPublisher

# The Home Assistant MQTT discovery schema, written down independently of the code: the
# keys each component requires here (a state topic; the device block needs an identifier,
# and a unique id puts the entity in the device registry).
REQUIRED = {
    "sensor": {"state_topic", "unique_id", "device", "name"},
    "binary_sensor": {"state_topic", "unique_id", "device", "name", "payload_on", "payload_off"},
}
# Keys Home Assistant accepts for these components (an unknown key fails its schema).
ALLOWED = REQUIRED["binary_sensor"] | {
    "availability_topic",
    "availability_template",
    "payload_available",
    "payload_not_available",
    "value_template",
    "device_class",
    "state_class",
    "unit_of_measurement",
    "icon",
    "origin",
    "qos",
}
DEVICE_KEYS = {"identifiers", "name", "manufacturer", "model", "sw_version"}


def _config(
    tmp_path: Path, port: int, tag: str, sources: list[str], device: str = "edge-1", **mqtt: Any
) -> AppConfig:
    return parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": device},
            "sources": [
                {"name": s, "path": str(tmp_path / s), "modality": "image"} for s in sources
            ],
            "mqtt": {
                "url": f"mqtt://127.0.0.1:{port}",
                "topic_prefix": f"p{tag}",
                "discovery": "homeassistant",
                "discovery_prefix": f"ha{tag}",
                "protocol": broker_protocol(),
                "client_id": f"ha-{tag}",
                **mqtt,
            },
        }
    )


def _announce(cfg: AppConfig) -> MqttPublisher:
    assert cfg.mqtt is not None
    pub = MqttPublisher(cfg.mqtt, cfg.device.id, cfg.spool, backoff_max=0.5)
    pub.start()
    assert wait_until(lambda: pub.connected, 10)
    sent = announce(cfg, [pub])
    assert wait_until(lambda: pub.stats()["acked"] >= sent, 10)  # the broker has them
    return pub


def _retained(port: int, topic: str, expect: int, timeout: float = 10.0) -> dict[str, bytes]:
    """What the broker keeps retained under ``topic``, once it holds ``expect`` messages there.

    Each look is a fresh subscriber, given what is retained flagged as such. A message that
    reaches the broker meanwhile comes flagged live and does not count: the next look sees
    it retained. (Durable is not on the broker: a message the publisher spooled before its
    connection was up reaches the broker later.) With ``expect`` 0, what one look gathers
    in half a second.
    """
    end = time.monotonic() + timeout
    while True:
        out = _look(port, topic, expect)
        if len(out) >= expect or time.monotonic() >= end:
            return out


def _look(port: int, topic: str, expect: int) -> dict[str, bytes]:
    """The retained messages a fresh subscriber to ``topic`` gets within a second."""
    sub = Subscriber(port, topic, persistent=False)
    wait_until(lambda: sum(r for _, _, r in sub.messages) >= max(expect, 1), 1.0 if expect else 0.5)
    out = {t: p for t, p, retained in sub.messages if retained}
    sub.close()
    return out


def _clear(port: int, topics: list[str]) -> None:
    """Leave nothing retained on the shared broker."""
    publish.multiple([(t, b"", 1, True) for t in topics], hostname="127.0.0.1", port=port)


def test_discovery_configs_have_the_required_keys_and_availability(
    tmp_path: Path, broker_port: int
) -> None:
    tag = uuid.uuid4().hex[:8]
    cfg = _config(tmp_path, broker_port, tag, ["cam1", "mic1"])
    pub = _announce(cfg)
    try:
        configs = _retained(broker_port, f"ha{tag}/#", 11)
        assert len(configs) == 11  # 5 entities per source and the device's online
        status = f"p{tag}/edge-1/status"
        components = set()
        for topic, raw in configs.items():
            prefix, component, node, obj, last = topic.split("/")
            assert (prefix, node, last) == (f"ha{tag}", "edge-1", "config")
            components.add(component)
            doc = json.loads(raw)
            assert REQUIRED[component] <= doc.keys() <= ALLOWED, topic
            assert doc["device"]["identifiers"] == ["cdml_edge_edge-1"]
            assert doc["device"].keys() <= DEVICE_KEYS
            assert doc["unique_id"].endswith(obj)
            if obj == "online":
                assert doc["state_topic"] == status
                assert (doc["payload_on"], doc["payload_off"]) == ("online", "offline")
                assert doc["device_class"] == "connectivity"
            else:
                assert doc["availability_topic"] == status
                assert doc["availability_template"] == "{{ value_json.state }}"
                assert doc["payload_available"] == "online"
                assert doc["payload_not_available"] == "offline"
                source = obj.split("_")[0]
                kind = "window" if obj.endswith("_rate") else "result"
                assert doc["state_topic"] == f"p{tag}/edge-1/{source}/{kind}"
        assert components == {"sensor", "binary_sensor"}
        # the availability topic is there, retained, with the payload the template reads
        state = _retained(broker_port, status, 1)
        assert json.loads(state[status])["state"] == "online"
        assert wait_until(lambda: ledger_path(cfg).exists(), 5)
    finally:
        pub.stop()
    assert json.loads(_retained(broker_port, status, 1)[status])["state"] == "offline"
    _clear(broker_port, [*configs, status])


def test_a_source_removed_from_the_config_loses_its_entities(
    tmp_path: Path, broker_port: int
) -> None:
    tag = uuid.uuid4().hex[:8]
    first = _config(tmp_path, broker_port, tag, ["cam1", "cam2"])
    pub = _announce(first)
    assert wait_until(lambda: ledger_path(first).exists(), 5)
    pub.stop()
    assert len(_retained(broker_port, f"ha{tag}/#", 11)) == 11
    # a restart (or reload) with cam2 gone from the configuration
    second = _config(tmp_path, broker_port, tag, ["cam1"])
    pub = _announce(second)
    assert wait_until(lambda: len(json.loads(ledger_path(second).read_text())["topics"]) == 6, 5)
    pub.stop()
    left = _retained(broker_port, f"ha{tag}/#", 6)
    assert set(left) == set(discovery_configs(second))
    assert not any("cam2" in t for t in left)
    # and discovery turned off removes the rest
    third = _config(tmp_path, broker_port, tag, ["cam1"], discovery=None)
    pub = _announce(third)
    assert wait_until(lambda: json.loads(ledger_path(third).read_text())["topics"] == [], 5)
    pub.stop()
    assert _retained(broker_port, f"ha{tag}/#", 0) == {}
    _clear(broker_port, [f"p{tag}/edge-1/status"])


def test_the_last_will_makes_the_entities_unavailable(tmp_path: Path, broker_port: int) -> None:
    """A killed agent: the broker publishes the retained ``offline`` the configs read."""
    tag = uuid.uuid4().hex[:8]
    cfg = _config(tmp_path, broker_port, tag, ["cam1"], keepalive=1)
    script = tmp_path / "agent.py"
    script.write_text(
        "import sys, time\n"
        "from cdml_edge.config import parse_config\n"
        "from cdml_edge.outputs.homeassistant import announce\n"
        "from cdml_edge.outputs.mqtt.publisher import MqttPublisher\n"
        f"cfg = parse_config({cfg.model_dump(mode='json')!r})\n"
        "pub = MqttPublisher(cfg.mqtt, cfg.device.id, cfg.spool)\n"
        "pub.start()\n"
        "announce(cfg, [pub])\n"
        "from cdml_edge.outputs.homeassistant import ledger_path\n"
        "while not ledger_path(cfg).exists():\n"  # the broker has the configs
        "    time.sleep(0.02)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        status = f"p{tag}/edge-1/status"
        configs = _retained(broker_port, f"ha{tag}/#", 6)
        doc = json.loads(configs[f"ha{tag}/sensor/edge-1/cam1_label/config"])
        assert doc["availability_topic"] == status
        assert wait_until(
            lambda: (
                json.loads(_retained(broker_port, status, 1).get(status, b"{}")).get("state")
                == "online"
            ),
            10,
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert wait_until(
            lambda: (
                json.loads(_retained(broker_port, status, 1)[status])["state"]
                == doc["payload_not_available"]
            ),
            10,
        )
    finally:
        proc.kill()
        proc.wait(5)
    _clear(broker_port, [*configs, status])


def test_configs_go_at_qos_1_when_results_go_at_qos_0(tmp_path: Path, broker_port: int) -> None:
    """``mqtt.qos: 0`` is for results: the retained configs and removals stay QoS 1.

    Before, they went at the results' QoS 0, so a removal lost with a dropped connection
    was already struck from the ledger and the entity it removed stayed for good.
    """
    tag = uuid.uuid4().hex[:8]
    got: list[tuple[str, int]] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"ha-sub-{tag}")
    sub.on_message = lambda c, u, msg: got.append((msg.topic, msg.qos))
    sub.connect("127.0.0.1", broker_port)
    sub.subscribe(f"ha{tag}/#", qos=1)
    sub.loop_start()
    time.sleep(0.5)
    cfg = _config(tmp_path, broker_port, tag, ["cam1"], qos=0)
    pub = _announce(cfg)
    try:
        assert wait_until(lambda: len(got) >= 6, 10), got
        assert {q for _, q in got} == {1}, got
    finally:
        pub.stop()
        sub.loop_stop()
        sub.disconnect()
    _clear(broker_port, [t for t, _ in got] + [f"p{tag}/edge-1/status"])


# Home Assistant's discovery topic, as its documentation gives it: node and object ids of
# [a-zA-Z0-9_-] only; a config on any other topic is ignored without a word.
HA_TOPIC = re.compile(r"(?P<component>\w+)/(?:(?P<node_id>[a-zA-Z0-9_-]+)/)?[a-zA-Z0-9_-]+/config")


def test_a_dot_in_the_device_id_or_a_source_name_still_gives_topics_ha_reads(
    tmp_path: Path, broker_port: int
) -> None:
    """``device.id`` and source names may hold a '.', which Home Assistant's ids may not."""
    tag = uuid.uuid4().hex[:8]
    cfg = _config(tmp_path, broker_port, tag, ["cam.1", "cam2"], device="line3.edge1")
    pub = _announce(cfg)
    try:
        configs = _retained(broker_port, f"ha{tag}/#", 11)
        assert len(configs) == 11
        for topic, raw in configs.items():
            assert HA_TOPIC.fullmatch(topic.split("/", 1)[1]), topic
            doc = json.loads(raw)
            assert doc["device"]["identifiers"] == ["cdml_edge_line3.edge1"]
        states = {json.loads(raw)["state_topic"] for raw in configs.values()}
        assert f"p{tag}/line3.edge1/cam.1/result" in states  # our topics keep the names
        assert len({json.loads(raw)["unique_id"] for raw in configs.values()}) == 11
    finally:
        pub.stop()
    _clear(broker_port, [*configs, f"p{tag}/line3.edge1/status"])


def test_sources_whose_ids_clash_in_home_assistant_each_keep_their_entities(
    tmp_path: Path,
) -> None:
    """Valid source names whose entities shared a discovery topic and unique id.

    ``cam.1`` and ``cam_1`` (a '.' becomes '_'); ``a`` and ``a_anomaly`` (``a``'s
    ``anomaly_score`` is ``a_anomaly``'s ``score``): Home Assistant showed one of them only.
    """
    sources = ["a", "a_anomaly", "cam.1", "cam_1"]
    cfg = _config(tmp_path, 1883, "clash", sources)
    configs = discovery_configs(cfg)
    assert len(configs) == 1 + 5 * len(sources), sorted(configs)
    assert len({c["unique_id"] for c in configs.values()}) == len(configs)
    for topic in configs:
        assert HA_TOPIC.fullmatch(topic.split("/", 1)[1]), topic
    names = {c["name"] for c in configs.values()}
    assert {f"{s} {n}" for s in sources for n in ("score", "anomaly score")} <= names
    plain = _config(tmp_path, 1883, "clash", ["a", "cam_1"])  # no clash: topics as before
    assert set(discovery_configs(plain)) <= set(configs)
