"""A retained message spooled earlier never overwrites a newer one sent live.

After an outage the spool drains between live messages. A camera's retained state
spooled while the broker was away (``down``) went out after the newer state published
live once it was back (``streaming``): the broker kept ``down`` as the retained state,
and every new subscriber (a dashboard, Home Assistant) saw a camera that was streaming
as down.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage

pytestmark = pytest.mark.skipif(mosquitto_binary() is None, reason="needs Mosquitto")


SPOOLED = 3000


def _result(i: int) -> OutMessage:
    return OutMessage("cam/result", json.dumps({"id": f"r{i}", "pad": "x" * 200}).encode())


def _camera(state: str) -> OutMessage:
    return OutMessage("cam/camera", json.dumps({"state": state}).encode(), retain=True)


def test_a_spooled_retained_state_does_not_overwrite_a_newer_live_one(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    config = MqttConfig(url=broker.url, topic_prefix=prefix, keepalive=5)
    pub = MqttPublisher(config, "edge-1", SpoolConfig(dir=tmp_path / "spool"), backoff_max=0.2)
    pub.start()
    try:
        # the broker is away: results, then the camera going down, all spooled; enough of
        # them that the drain is still going when the newer state is published live
        pub.publish_batch([_result(i) for i in range(SPOOLED)])
        pub.publish_batch([_camera("down")])
        assert wait_until(lambda: pub.stats()["spool_records"] == SPOOLED + 1, 20)
        broker.start()
        seen = Subscriber(broker.port, f"{prefix}/edge-1/cam/camera")
        assert wait_until(lambda: pub.connected, 15)
        pub.publish_batch([_camera("streaming")])  # newer, live, while the spool drains
        assert wait_until(lambda: pub.stats()["spool_records"] == 0, 60), pub.stats()
        late = Subscriber(broker.port, f"{prefix}/edge-1/cam/camera")
        try:
            assert wait_until(lambda: len(late.messages) >= 1, 5)
            retained = [json.loads(p)["state"] for _t, p, r in late.messages if r]
            assert retained == ["streaming"], late.messages
            order = [json.loads(p)["state"] for _t, p, _r in seen.messages]
            if pub.stats()["superseded"] == 0:  # the drain was done before: in order anyway
                assert order == ["down", "streaming"], order
            else:
                assert pub.stats()["superseded"] == 1 and order == ["streaming"], order
        finally:
            late.close()
            seen.close()
    finally:
        pub.stop(2)
        broker.stop()
