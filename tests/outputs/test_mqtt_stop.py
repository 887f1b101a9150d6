"""``MqttPublisher.stop()`` delivers what was queued, spooled records included.

It does so while the broker can be reached within its timeout; what it cannot deliver stays in
the spool.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

from helpers.mqtt_brokers import (
    SHARED_PORT,
    BrokerProcess,
    HeldProxy,
    Subscriber,
    mosquitto_binary,
    port_open,
    wait_until,
)

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage


def _results(start: int, n: int) -> list[OutMessage]:
    return [
        OutMessage("cam1/result", json.dumps({"id": f"r{i}", "seq": i + 1}).encode())
        for i in range(start, start + n)
    ]


def test_stop_delivers_what_was_spooled_before_the_connection_was_up(tmp_path: Path) -> None:
    """The replay loss: results published before the CONNACK were left in the spool.

    They went to the spool; ``stop()`` came before the connection was up and left them there. The
    proxy holds the CONNACK until ``stop()`` has begun, so this happens on every run.
    """
    own = None
    port = SHARED_PORT
    if not (mosquitto_binary() and port_open(SHARED_PORT)):
        own = BrokerProcess(tmp_path / "broker").start()
        port = own.port
    prefix = f"s{uuid.uuid4().hex[:8]}"
    sub = Subscriber(port, f"{prefix}/#")
    proxy = HeldProxy(port)
    protocol = "5" if own is None or own.is_mosquitto else "3.1.1"
    pub = MqttPublisher(
        MqttConfig(url=proxy.url, topic_prefix=prefix, protocol=protocol),  # type: ignore[arg-type]
        "edge-1",
        SpoolConfig(dir=tmp_path / "spool"),  # type: ignore[call-arg]
    )
    durable = threading.Event()
    try:
        pub.publish_batch(_results(0, 4), durable.set)  # no connection yet: spooled
        assert durable.is_set() and pub.stats()["spool_records"] == 4
        pub.start()
        assert proxy.connected.wait(10)  # CONNECT sent, CONNACK held
        stopper = threading.Thread(target=pub.stop, kwargs={"timeout": 10.0})
        stopper.start()
        stopper.join(0.3)  # stop() has begun while the connection is not up
        proxy.release()
        stopper.join(20)
        assert not stopper.is_alive()
        assert wait_until(lambda: len(sub.ids()) >= 4, 10), sub.ids()
        assert sorted(set(sub.ids())) == ["r0", "r1", "r2", "r3"]
        assert pub.stats()["spool_records"] == 0
    finally:
        sub.close()
        proxy.close()
        if own is not None:
            own.stop()
