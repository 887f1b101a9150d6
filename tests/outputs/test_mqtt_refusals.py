"""MQTT names a broker refuses are caught by validation; a refusal is logged with its reason.

A NUL in ``topic_prefix`` makes Mosquitto close the connection without a CONNACK (the Last
Will's topic holds it): before, ``config validate`` passed it and the agent retried forever
without a word. Real Mosquitto where a broker is needed.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.mqtt_brokers import (
    SHARED_PORT,
    BrokerProcess,
    broker_protocol,
    mosquitto_binary,
    wait_until,
)
from helpers.paths import ROOT

from cdml_edge.config import ConfigError, MqttConfig, SpoolConfig, parse_config
from cdml_edge.outputs.mqtt.publisher import MqttPublisher

BAD_PREFIXES = [
    ("cd\x00ml", "holds a NUL character (at 2)"),
    ("line/+/x", "must not hold the MQTT wildcards '+' or '#'"),
    ("line/#", "must not hold the MQTT wildcards"),
    ("/line", "must not start with '/'"),
    ("$SYS/line", "must not start with '$'"),
    ("line//x", "must not hold an empty topic level"),
    ("line\nx", "control or surrogate character"),
    ("x" * 1025, "must be at most 1024 bytes"),
]


@pytest.mark.parametrize(("prefix", "says"), BAD_PREFIXES)
def test_topic_prefix_rules(prefix: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"mqtt": {"topic_prefix": prefix}}, "factory.yaml")
    assert err.value.problems == [("mqtt.topic_prefix", says)] or says in str(err.value)
    assert "mqtt.topic_prefix" in str(err.value)


def test_client_id_and_username_hold_no_nul() -> None:
    for key in ("client_id", "username"):
        with pytest.raises(ConfigError, match=f"mqtt.{key}: holds a NUL character"):
            parse_config({"mqtt": {key: "edge\x00"}})
    assert parse_config({"mqtt": {"topic_prefix": "plant/line-2/"}}).mqtt
    assert parse_config({"mqtt": {"topic_prefix": "plant/line-2/"}}).mqtt.topic_prefix == (
        "plant/line-2"
    )


def test_cli_validate_refuses_a_nul_in_the_prefix(tmp_path: Path) -> None:
    cfg = tmp_path / "factory.yaml"
    cfg.write_text('mqtt: {topic_prefix: "cd\\0ml"}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "config", "validate", str(cfg)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "mqtt.topic_prefix: holds a NUL character" in proc.stderr


@pytest.mark.skipif(mosquitto_binary() is None, reason="the silent close is Mosquitto's")
def test_a_broker_closing_before_its_connack_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A prefix that bypassed validation: the broker's silent close is said, once."""
    settings = MqttConfig.model_construct(
        **{**MqttConfig().model_dump(), "url": f"mqtt://127.0.0.1:{SHARED_PORT}"},
    )
    settings.topic_prefix = "cd\x00ml"
    settings.protocol = broker_protocol()  # type: ignore[assignment]
    pub = MqttPublisher(settings, "edge-1", SpoolConfig(dir=tmp_path / "spool"), backoff_max=0.3)
    caplog.set_level(logging.DEBUG, logger="cdml_edge.outputs.mqtt.publisher")
    pub.start()
    try:
        assert wait_until(lambda: pub.stats()["connect_failures"] >= 2, 10)
        assert not pub.connected
    finally:
        pub.stop(timeout=1)
    said = [r for r in caplog.records if "closed the connection before accepting it" in r.message]
    assert said and said[0].levelno == logging.WARNING
    assert all(r.levelno == logging.DEBUG for r in said[1:])  # once per outage


@pytest.mark.skipif(mosquitto_binary() is None, reason="broker authentication needs mosquitto")
def test_a_connack_refusal_is_logged_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pwfile = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(pwfile), "edge", "s3cret"], check=True)
    broker = BrokerProcess(tmp_path / "broker", password_file=pwfile).start()
    bad = tmp_path / "bad.pass"
    bad.write_text("wrong\n")
    caplog.set_level(logging.DEBUG, logger="cdml_edge.outputs.mqtt.publisher")
    try:
        pub = MqttPublisher(
            MqttConfig(url=broker.url, username="edge", password_file=bad, protocol="5"),
            "edge-1",
            SpoolConfig(dir=tmp_path / "s1"),
            backoff_max=0.3,
        )
        pub.start()
        assert wait_until(lambda: pub.stats()["connect_failures"] >= 2, 10)
        pub.stop(timeout=1)
    finally:
        broker.stop()
    refused = [r.message for r in caplog.records if "refused the connection" in r.message]
    assert refused and ("Not authorized" in refused[0] or "Bad user name" in refused[0])
    assert not [r for r in caplog.records if "before accepting it" in r.message]


@pytest.mark.skipif(mosquitto_binary() is None, reason="needs mosquitto")
def test_two_clients_with_one_client_id_are_suspected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two agents with one device id push each other off: the log says what it looks like.

    Mosquitto 2.0 closes the old session without a DISCONNECT reason, so each agent only
    saw "lost the connection", twice a second, for ever.
    """
    broker = BrokerProcess(tmp_path / "broker").start()
    caplog.set_level(logging.INFO, logger="cdml_edge.outputs.mqtt.publisher")
    twins = [
        MqttPublisher(
            MqttConfig(url=broker.url, protocol=broker_protocol()),
            "twin",
            SpoolConfig(dir=tmp_path / f"s{k}"),
        )
        for k in (1, 2)
    ]
    try:
        for pub in twins:
            pub.start()
        assert wait_until(lambda: any("in a row" in r.message for r in caplog.records), 20), [
            r.message for r in caplog.records
        ]
    finally:
        for pub in twins:
            pub.stop(timeout=1)
        broker.stop()
    said = [r for r in caplog.records if "in a row" in r.message]
    assert said[0].levelno == logging.WARNING
    assert repr(twins[0].client_id) in said[0].message and "device.id" in said[0].message


def test_a_broker_disconnect_reason_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that says why it closed (MQTT 5 DISCONNECT, 0x8E): the log line names it."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)  # CONNECT
            conn.sendall(b"\x20\x03\x00\x00\x00")  # CONNACK: accepted, no properties
            time.sleep(0.3)
            conn.sendall(b"\xe0\x02\x8e\x00")  # DISCONNECT: session taken over
            time.sleep(0.3)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    caplog.set_level(logging.INFO, logger="cdml_edge.outputs.mqtt.publisher")
    pub = MqttPublisher(
        MqttConfig(url=f"mqtt://127.0.0.1:{port}", protocol="5"),
        "edge-7",
        SpoolConfig(dir=tmp_path / "s"),
        backoff_min=5.0,
    )
    pub.start()
    try:
        assert wait_until(lambda: any("lost" in r.message for r in caplog.records), 10)
    finally:
        pub.stop(timeout=1)
        server.close()
    lost = next(r.message for r in caplog.records if "lost" in r.message)
    assert "'Session taken over'" in lost and repr(pub.client_id) in lost, lost
