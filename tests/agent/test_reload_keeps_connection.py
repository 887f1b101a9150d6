"""A reload that leaves the MQTT settings as they were keeps the connection.

Before, every reload stopped the publisher and made a new one: subscribers saw the
retained ``status`` go ``offline`` then ``online`` (Home Assistant showed every entity
unavailable for a moment) and the broker saw a second connection. ``seq`` goes on across
a reload (the agent keeps its counters). A reload that changes the MQTT settings still
reconnects.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from helpers.agent_runs import cam_config, jpeg, wait_for, write_atomic
from helpers.mqtt_brokers import Subscriber, broker_protocol

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _config(tmp_path: Path, port: int, tag: str, max_items: int, prefix: str) -> Path:
    mqtt = (
        f"mqtt: {{url: 'mqtt://127.0.0.1:{port}', topic_prefix: {prefix}, "
        f"client_id: c{tag}, protocol: '{broker_protocol()}'}}\n"
    )
    return cam_config(tmp_path, mqtt, max_items=max_items)


def _states(sub: Subscriber) -> list[str]:
    return [m["state"] for m in sub.on("/status")]


def test_a_reload_of_other_settings_keeps_the_connection_and_the_seq(
    tmp_path: Path, broker_port: int
) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix = f"p{tag}"
    cfg_path = _config(tmp_path, broker_port, tag, 2, prefix)
    sub = Subscriber(broker_port, f"{prefix}/#")
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: _states(sub) == ["online"], what="online")
        write_atomic(tmp_path / "in/cam1/0.jpg", jpeg(10))
        wait_for(lambda: len(sub.on("/result")) == 1, what="the first result")
        _config(tmp_path, broker_port, tag, 3, prefix)  # the window changes, MQTT does not
        assert agent.reload()
        assert agent.cfg.sources[0].window.max_items == 3
        write_atomic(tmp_path / "in/cam1/1.jpg", jpeg(200))
        wait_for(lambda: len(sub.on("/result")) == 2, what="a result after the reload")
        assert _states(sub) == ["online"]
        assert [r["seq"] for r in sub.on("/result")] == [1, 2]
        assert agent.output.stats()["reconnects"] == 1
    finally:
        agent.stop()
    wait_for(lambda: _states(sub)[-1] == "offline", 5, what="offline at stop")
    sub.close()


def test_a_reload_of_the_mqtt_settings_reconnects(tmp_path: Path, broker_port: int) -> None:
    tag = uuid.uuid4().hex[:8]
    cfg_path = _config(tmp_path, broker_port, tag, 2, f"p{tag}")
    sub = Subscriber(broker_port, f"p{tag}/#")
    sub2 = Subscriber(broker_port, f"q{tag}/#")
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: _states(sub) == ["online"], what="online")
        _config(tmp_path, broker_port, tag, 2, f"q{tag}")
        assert agent.reload()
        wait_for(lambda: _states(sub) == ["online", "offline"], what="offline on the old prefix")
        wait_for(lambda: _states(sub2) == ["online"], what="online on the new prefix")
        write_atomic(tmp_path / "in/cam1/0.jpg", jpeg(10))
        wait_for(lambda: len(sub2.on("/result")) == 1, what="a result on the new prefix")
    finally:
        agent.stop()
        sub.close()
        sub2.close()
