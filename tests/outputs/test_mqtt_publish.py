"""Publishing to a real broker.

Documented payloads, status / Last Will, no-broker start-up, credentials, TLS / mTLS, and the
embedded broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import (
    BrokerProcess,
    Subscriber,
    broker_protocol,
    make_certs,
    mosquitto_binary,
    wait_until,
)
from helpers.paths import HELPERS
from helpers.ports import free_port

from cdml_edge.config import MqttConfig, SpoolConfig, TlsConfig
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.outputs.mqtt.tls import MqttSetupError, resolve_password
from cdml_edge.window.payloads import (
    ErrorEvent,
    HealthPayload,
    ItemResult,
    StatusPayload,
    WindowResult,
    item_id,
)
from cdml_edge.window.topics import OutMessage, Sequencer, relative_topic, topic_for


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def _publisher(url: str, prefix: str, spool: Path, **kw: object) -> MqttPublisher:
    return MqttPublisher(
        MqttConfig(url=url, topic_prefix=prefix, keepalive=5, protocol=broker_protocol()),
        "edge-1",
        SpoolConfig(dir=spool),
        backoff_max=1.0,
        **kw,  # type: ignore[arg-type]
    )


def _results(seq: Sequencer, n: int, start: int = 0) -> list[OutMessage]:
    out = []
    for i in range(start, start + n):
        topic = relative_topic("result", "cam1")
        result = ItemResult(
            id=item_id("cam1", f"img_{i:05d}.jpg", 1000 + i, 1_700_000_000 + i),
            window_id="w-1",
            source="cam1",
            item=f"img_{i:05d}.jpg",
            modality="image",
            ts=1_700_000_000.0 + i,
            label="ok",
            score=0.97,
            anomaly=False,
            anomaly_score=0.02,
            latency_ms=4.5,
            model="tier2-image",
            model_version="3",
            seq=seq.next(topic),
            device="edge-1",
        )
        out.append(OutMessage(topic, result.model_dump_json().encode()))
    return out


def test_subscriber_receives_the_documented_payloads(broker_port: int, tmp_path: Path) -> None:
    prefix = _prefix()
    sub = Subscriber(broker_port, f"{prefix}/#", persistent=False)
    pub = _publisher(f"mqtt://127.0.0.1:{broker_port}", prefix, tmp_path / "spool")
    pub.start()
    assert wait_until(lambda: pub.connected, 10)
    seq = Sequencer()
    durable = threading.Event()
    window = WindowResult(
        window_id="w-1",
        source="cam1",
        counts={"ok": 5},
        items=5,
        errors=0,
        archive={"name": "cam1-w-1.zip", "format": "zip", "bytes": 5120, "sha256": "a" * 64},
        opened_ts=1.0,
        closed_ts=2.0,
        seq=seq.next("cam1/window"),
        device="edge-1",
    )
    health = HealthPayload(
        items=5,
        windows=1,
        seq=seq.next("health"),
        device="edge-1",
        broker_connected=True,
        **{"uptime_s": 3.0},
    )
    error = ErrorEvent(
        source="cam1",
        item="bad.jpg",
        error_type="DecodeError",
        message="not a JPEG",
        ts=2.0,
        seq=seq.next("cam1/error"),
        device="edge-1",
    )
    messages = _results(seq, 5) + [
        OutMessage("cam1/window", window.model_dump_json().encode()),
        OutMessage("health", health.model_dump_json().encode()),
        OutMessage("cam1/error", error.model_dump_json().encode()),
    ]
    pub.publish_batch(messages, durable.set)
    assert durable.wait(10)
    assert wait_until(lambda: len(sub.on("/result")) == 5 and sub.on("/error"), 10)
    results = [
        ItemResult.model_validate(m) for m in sub.on(topic_for(prefix, "edge-1", "result", "cam1"))
    ]
    assert [r.seq for r in results] == [1, 2, 3, 4, 5]
    assert WindowResult.model_validate(sub.on("/cam1/window")[0]) == window
    assert HealthPayload.model_validate(sub.on(f"{prefix}/edge-1/health")[0]) == health
    assert ErrorEvent.model_validate(sub.on("/cam1/error")[0]) == error
    status = [(p, r) for t, p, r in sub.messages if t == f"{prefix}/edge-1/status"]
    assert StatusPayload.model_validate_json(status[0][0]).state == "online"
    stats = pub.stats()
    assert stats["acked"] == 8 and stats["spooled"] == 0 and stats["bytes_written"] == 0
    pub.stop()
    sub.close()
    # a late subscriber gets the retained status: offline after a clean stop
    late = Subscriber(broker_port, f"{prefix}/edge-1/status", persistent=False)
    assert wait_until(lambda: bool(late.on("/status")), 10)
    assert late.on("/status")[-1]["state"] == "offline"
    assert late.messages[-1][2] is True  # retained
    late.close()


def test_last_will_says_offline_when_the_agent_is_killed(broker_port: int, tmp_path: Path) -> None:
    prefix = _prefix()
    sub = Subscriber(broker_port, f"{prefix}/edge-1/status", persistent=False)
    cfg = tmp_path / "proc.json"
    cfg.write_text(
        json.dumps(
            {
                "url": f"mqtt://127.0.0.1:{broker_port}",
                "prefix": prefix,
                "device": "edge-1",
                "spool": str(tmp_path / "spool"),
                "count": 10,
                "wait_connected": True,
                "keepalive": 1,
                "protocol": broker_protocol(),
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(HELPERS / "mqtt_publisher_proc.py"), str(cfg)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("durable 10")
        assert wait_until(lambda: any(m["state"] == "online" for m in sub.on("/status")), 10)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert wait_until(lambda: sub.on("/status")[-1]["state"] == "offline", 15)
    finally:
        if proc.poll() is None:
            proc.kill()
        sub.close()


def test_starts_and_runs_with_no_broker_then_delivers(tmp_path: Path) -> None:
    port = free_port()  # nothing listens here yet
    prefix = _prefix()
    pub = _publisher(f"mqtt://127.0.0.1:{port}", prefix, tmp_path / "spool")
    pub.start()  # returns at once
    seq = Sequencer()
    durable: list[int] = []
    for i in range(10):
        pub.publish_batch(_results(seq, 10, start=i * 10), lambda: durable.append(1))
    assert len(durable) == 10  # spooled synchronously: safe on disk
    stats = pub.stats()
    assert stats["spooled"] == 100 and stats["spool_records"] == 100
    assert not pub.connected
    assert wait_until(lambda: pub.stats()["connect_failures"] >= 1, 5)
    broker = BrokerProcess(tmp_path / "broker", port=port).start()
    try:
        sub = Subscriber(port, f"{prefix}/#")
        assert wait_until(lambda: len(set(sub.ids())) == 100, 30), len(set(sub.ids()))
        assert wait_until(lambda: pub.stats()["spool_records"] == 0, 10)
        pub.stop()
        sub.close()
    finally:
        broker.stop()


def test_password_from_file_or_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "mqtt.pass"
    secret.write_text("s3cret\n")
    assert resolve_password(MqttConfig(username="edge", password_file=secret)) == "s3cret"
    monkeypatch.setenv("EDGE_MQTT_PASSWORD", "from-env")
    assert resolve_password(MqttConfig(username="edge", password_env="EDGE_MQTT_PASSWORD")) == (
        "from-env"
    )
    with pytest.raises(MqttSetupError, match="MISSING_VAR"):
        resolve_password(MqttConfig(username="edge", password_env="MISSING_VAR"))
    with pytest.raises(MqttSetupError, match="password_file"):
        resolve_password(MqttConfig(username="edge", password_file=tmp_path / "nope"))
    with pytest.raises(ValueError, match="clear-text password is refused"):
        MqttConfig(username="edge", password="hunter2")
    allowed = MqttConfig(username="edge", password="hunter2", allow_plaintext_password=True)
    assert resolve_password(allowed) == "hunter2"


@pytest.mark.skipif(mosquitto_binary() is None, reason="broker authentication needs mosquitto")
def test_broker_accepts_the_right_password_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    pwfile = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(pwfile), "edge", "s3cret"], check=True)
    broker = BrokerProcess(tmp_path / "broker", password_file=pwfile).start()
    good, bad = tmp_path / "good.pass", tmp_path / "bad.pass"
    good.write_text("s3cret\n")
    bad.write_text("wrong\n")
    try:
        wrong = MqttPublisher(
            MqttConfig(
                url=broker.url, username="edge", password_file=bad, protocol=broker.protocol
            ),
            "edge-1",
            SpoolConfig(dir=tmp_path / "s1"),
            backoff_max=0.5,
        )
        wrong.start()
        wrong.publish_batch(_results(Sequencer(), 3))
        assert wait_until(lambda: wrong.stats()["connect_failures"] >= 2, 10)  # refused, retried
        assert not wrong.connected
        assert wrong.stats()["spool_records"] == 3  # kept safe while refused
        wrong.stop(timeout=1)
        right = MqttPublisher(
            MqttConfig(
                url=broker.url, username="edge", password_file=good, protocol=broker.protocol
            ),
            "edge-1",
            SpoolConfig(dir=tmp_path / "s1"),
            backoff_max=0.5,
        )
        right.start()
        assert wait_until(lambda: right.connected, 10)
        assert wait_until(lambda: right.stats()["spool_records"] == 0, 10)
        right.stop()
    finally:
        broker.stop()


def test_tls_with_client_certificates(tmp_path: Path) -> None:
    tls = make_certs(tmp_path / "pki")
    broker = BrokerProcess(tmp_path / "broker", tls=tls).start()
    prefix = _prefix()
    try:
        sub = Subscriber(broker.port, f"{prefix}/#", tls=tls, persistent=False)

        def publisher(name: str, tls_cfg: TlsConfig) -> MqttPublisher:
            pub = MqttPublisher(
                MqttConfig(
                    url=broker.url, topic_prefix=prefix, tls=tls_cfg, protocol=broker.protocol
                ),
                name,
                SpoolConfig(dir=tmp_path / name),
                backoff_max=0.5,
            )
            pub.start()
            return pub

        mtls = publisher("good", TlsConfig(ca=tls.ca, cert=tls.client_cert, key=tls.client_key))
        assert wait_until(lambda: mtls.connected, 10)
        mtls.publish_batch([OutMessage("cam1/result", b'{"id": "tls-1"}')])
        assert wait_until(lambda: sub.ids() == ["tls-1"], 10)
        mtls.stop()

        wrong_ca = publisher(
            "wrongca", TlsConfig(ca=tls.other_ca, cert=tls.client_cert, key=tls.client_key)
        )
        assert wait_until(lambda: wrong_ca.stats()["connect_failures"] >= 1, 10)
        assert not wrong_ca.connected  # the broker certificate is not trusted
        wrong_ca.stop(timeout=1)

        insecure = publisher(
            "insecure",
            TlsConfig(ca=tls.other_ca, cert=tls.client_cert, key=tls.client_key, insecure=True),
        )
        assert wait_until(lambda: insecure.connected, 10)  # only with the explicit flag
        insecure.stop()

        if broker.is_mosquitto:  # amqtt asks for a client certificate but does not require it
            no_cert = publisher("nocert", TlsConfig(ca=tls.ca))
            assert not wait_until(lambda: no_cert.connected, 3)
            no_cert.stop(timeout=1)
        sub.close()
    finally:
        broker.stop()


def test_embedded_broker_in_process(tmp_path: Path) -> None:
    prefix = _prefix()
    pub = MqttPublisher(
        MqttConfig(url="embedded", topic_prefix=prefix),
        "edge-1",
        SpoolConfig(dir=tmp_path / "spool"),
    )
    assert pub.protocol == "3.1.1"
    pub.start()
    try:
        assert pub.broker is not None
        sub = Subscriber(pub.broker.port, f"{prefix}/#", persistent=False)
        assert wait_until(lambda: pub.connected, 10)
        done = threading.Event()
        pub.publish_batch(_results(Sequencer(), 20), done.set)
        assert done.wait(10)
        assert wait_until(lambda: len(sub.ids()) == 20, 10)
        sub.close()
    finally:
        pub.stop()
    with pytest.raises(MqttSetupError, match="3.1.1"):
        MqttPublisher(
            MqttConfig(url="embedded", protocol="5"), "edge-1", SpoolConfig(dir=tmp_path / "s2")
        )


def test_a_message_larger_than_the_spool_is_not_reported_durable(tmp_path: Path) -> None:
    port = free_port()  # no broker: everything goes to the spool
    pub = MqttPublisher(
        MqttConfig(url=f"mqtt://127.0.0.1:{port}", topic_prefix=_prefix()),
        "edge-1",
        SpoolConfig(dir=tmp_path / "spool", max_bytes=64 * 1024),
    )
    pub.start()
    durable: list[str] = []
    small = OutMessage("cam1/result", b'{"id": "small"}')
    huge = OutMessage("cam1/result", b"x" * (128 * 1024))
    pub.publish_batch([small, huge], lambda: durable.append("mixed"))
    pub.publish_batch([small], lambda: durable.append("small"))
    stats = pub.stats()
    assert durable == ["small"]  # the batch holding the unspoolable message never fires
    assert stats["too_large"] == 1 and stats["spooled"] == 2
    pub.stop(timeout=0.5)
    assert durable == ["small"]
    assert pub.stats()["too_large"] == 1  # not counted again when stop() spools leftovers
