"""A broker that closes the connection on a large PUBLISH without announcing its limit.

Under MQTT 3.1.1 a broker has no way to announce a Maximum Packet Size: Mosquitto with
``max_packet_size`` just closes the connection of a client that sends a larger PUBLISH.
Before, the publisher took the message back, spooled it, sent it first after every
reconnect and lost the connection again, for ever: nothing behind it was delivered and
``status`` flapped between ``online`` and the Last Will.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage

pytestmark = pytest.mark.skipif(mosquitto_binary() is None, reason="needs Mosquitto")

MAX_PACKET = 2048


def _result(i: int) -> OutMessage:
    return OutMessage("cam/result", json.dumps({"id": f"r{i}", "seq": i + 1}).encode())


def _big(n: int = 2) -> OutMessage:
    return OutMessage("cam/window", json.dumps({"pad": "x" * (n * MAX_PACKET)}).encode())


def _publisher(broker: BrokerProcess, prefix: str, spool: Path) -> MqttPublisher:
    config = MqttConfig(url=broker.url, topic_prefix=prefix, keepalive=5, protocol="3.1.1")
    return MqttPublisher(config, "edge-1", SpoolConfig(dir=spool), backoff_max=0.3)


def test_a_message_the_broker_keeps_refusing_is_given_up_and_the_rest_arrive(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = BrokerProcess(tmp_path / "broker", max_packet_size=MAX_PACKET).start()
    prefix = f"t{uuid.uuid4().hex[:10]}"
    sub = Subscriber(broker.port, f"{prefix}/#")
    pub = _publisher(broker, prefix, tmp_path / "spool")
    try:
        pub.start()
        assert wait_until(lambda: pub.connected, 15)
        pub.publish_batch([_result(i) for i in range(5)])
        assert wait_until(lambda: len(set(sub.ids())) == 5, 15), sub.ids()
        pub.publish_batch([_big()])
        pub.publish_batch([_result(i) for i in range(5, 10)])
        assert wait_until(lambda: len(set(sub.ids())) == 10, 30), sub.ids()
        assert wait_until(lambda: pub.stats()["spool_records"] == 0, 10)
        reconnects = pub.stats()["reconnects"]
        time.sleep(2.0)  # a loop would show as more reconnects
        stats = pub.stats()
        assert stats["reconnects"] == reconnects <= 4, stats
        assert stats["too_large"] == 1, stats
        assert sorted(set(sub.ids())) == sorted(f"r{i}" for i in range(10))
        # a later message as large is not sent at all: no connection lost for it
        pub.publish_batch([_big(3)])
        pub.publish_batch([_result(10)])
        assert wait_until(lambda: "r10" in sub.ids(), 10), sub.ids()
        time.sleep(1.0)
        stats = pub.stats()
        assert stats["too_large"] == 2 and stats["reconnects"] == reconnects, stats
        assert any("does not announce" in r.getMessage() for r in caplog.records)
    finally:
        pub.stop(2)
        sub.close()
        broker.stop()
