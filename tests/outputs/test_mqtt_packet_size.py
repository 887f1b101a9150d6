"""A broker whose ``max_packet_size`` is smaller than a message: the message is not sent.

Mosquitto announces its limit in the MQTT 5 CONNACK and closes the connection of a client
that sends a larger PUBLISH. Before, the publisher sent it anyway, lost the connection,
spooled it again and sent it first after every reconnect: nothing behind it was ever
delivered and ``status`` flapped between ``online`` and the Last Will.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig, parse_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage

pytestmark = pytest.mark.skipif(
    mosquitto_binary() is None, reason="needs Mosquitto (max_packet_size, MQTT 5)"
)

MAX_PACKET = 2048


def _result(i: int) -> OutMessage:
    return OutMessage("cam/result", json.dumps({"id": f"r{i}", "seq": i + 1}).encode())


def _big() -> OutMessage:
    return OutMessage("cam/window", json.dumps({"pad": "x" * (2 * MAX_PACKET)}).encode())


def _publisher(broker: BrokerProcess, prefix: str, spool: Path) -> MqttPublisher:
    config = MqttConfig(url=broker.url, topic_prefix=prefix, keepalive=5, protocol="5")
    return MqttPublisher(config, "edge-1", SpoolConfig(dir=spool), backoff_max=0.5)


def test_live_message_over_the_limit_is_not_sent_and_the_rest_arrive(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", max_packet_size=MAX_PACKET).start()
    prefix = f"t{uuid.uuid4().hex[:10]}"
    sub = Subscriber(broker.port, f"{prefix}/#")
    pub = _publisher(broker, prefix, tmp_path / "spool")
    durable: list[str] = []
    try:
        pub.start()
        assert wait_until(lambda: pub.connected, 15)
        pub.publish_batch([_result(i) for i in range(5)], lambda: durable.append("before"))
        pub.publish_batch([_big()], lambda: durable.append("big"))
        pub.publish_batch([_result(i) for i in range(5, 10)], lambda: durable.append("after"))
        assert wait_until(lambda: len(set(sub.ids())) == 10, 15), sub.ids()
        time.sleep(1.0)  # a lost connection would show as a second "online" and duplicates
        ids = sub.ids()
        assert sorted(ids) == sorted(f"r{i}" for i in range(10)), ids
        states = [m["state"] for m in sub.on("/status")]
        assert states == ["online"], states
        assert durable == ["before", "after"], durable  # the big window's files are kept
        stats = pub.stats()
        assert stats["too_large"] == 1
        assert stats["reconnects"] == 1
    finally:
        pub.stop(2)
        sub.close()
        broker.stop()


def test_spooled_message_over_the_limit_does_not_block_the_drain(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", max_packet_size=MAX_PACKET)
    prefix = f"t{uuid.uuid4().hex[:10]}"
    pub = _publisher(broker, prefix, tmp_path / "spool")
    durable: list[str] = []
    pub.start()
    try:
        # the broker is not up yet: all three batches go to the spool
        pub.publish_batch([_result(i) for i in range(5)], lambda: durable.append("before"))
        pub.publish_batch([_big()], lambda: durable.append("big"))
        pub.publish_batch([_result(i) for i in range(5, 10)], lambda: durable.append("after"))
        assert durable == ["before", "big", "after"]  # spooled = durable
        broker.start()
        sub = Subscriber(broker.port, f"{prefix}/#")
        try:
            assert wait_until(lambda: len(set(sub.ids())) == 10, 20), sub.ids()
            time.sleep(1.0)
            assert sorted(sub.ids()) == sorted(f"r{i}" for i in range(10)), sub.ids()
            assert [m["state"] for m in sub.on("/status")] == ["online"]
            stats = pub.stats()
            assert stats["too_large"] == 1
            assert stats["dropped"] == 1  # the subscriber never gets it: counted
            assert wait_until(lambda: pub.stats()["spool_records"] == 0, 5)
        finally:
            sub.close()
    finally:
        pub.stop(2)
        broker.stop()


def _spb_result(i: int, item: str) -> OutMessage:
    doc = {"id": f"r{i}", "window_id": "w1", "source": "cam1", "item": item}
    doc |= {"modality": "image", "ts": 1_700_000_000 + i, "label": "ok", "score": 0.9}
    doc |= {"anomaly": False, "anomaly_score": None, "latency_ms": 1.0, "model": "m"}
    doc |= {"seq": i + 1, "device": "edge-1"}
    return OutMessage("cam1/result", json.dumps(doc).encode())


def test_sparkplug_data_over_the_limit_leaves_no_gap_in_seq(tmp_path: Path) -> None:
    """A DDATA not sent takes no ``seq``: the host sees one session with numbers in a row."""
    pytest.importorskip("pysparkplug")
    from helpers.sparkplug import SparkplugSubscriber

    broker = BrokerProcess(tmp_path / "broker", max_packet_size=MAX_PACKET).start()
    group = f"g{uuid.uuid4().hex[:8]}"
    sub = SparkplugSubscriber(broker.port, group, persistent=False)
    cfg = parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [{"name": "cam1", "path": str(tmp_path / "cam1"), "modality": "image"}],
            "mqtt": {
                "url": broker.url,
                "format": "sparkplug_b",
                "sparkplug": {"group_id": group},
                "protocol": "5",
                "client_id": f"spb-{group}",
            },
        }
    )
    out = make_output(cfg)
    assert isinstance(out, SparkplugOutput)
    try:
        out.start()
        assert wait_until(lambda: out.publisher.connected, 10)
        out.publish_batch([_spb_result(i, f"img_{i}.jpg") for i in range(5)])
        out.publish_batch([_spb_result(5, "x" * (2 * MAX_PACKET))])
        out.publish_batch([_spb_result(i, f"img_{i}.jpg") for i in range(6, 11)])
        assert wait_until(lambda: len(sub.messages) >= 2 + 10, 15), len(sub.messages)
        time.sleep(1.0)
        got = sub.decoded()
        kinds = [r.kind for r in got]
        assert kinds == ["NBIRTH", "DBIRTH"] + ["DDATA"] * 10, kinds  # born once: no reconnect
        assert [r.payload.seq for r in got] == list(range(12))
        assert sub.result_ids() == [f"r{i}" for i in range(11) if i != 5]
        assert out.publisher.stats()["too_large"] == 1
    finally:
        out.stop()
        sub.close()
        broker.stop()
