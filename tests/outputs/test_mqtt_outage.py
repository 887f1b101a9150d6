"""Broker outages against a real broker process the test starts, stops and kills itself.

No result is lost across a 10 s outage, drop_oldest counts exactly what is missing, block
loses nothing, and a spool left by kill -9 drains after a restart: in both formats, our JSON
and Sparkplug B (whose results a subscriber reads from DDATA with an independent decoder).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, wait_until
from helpers.paths import HELPERS
from helpers.sparkplug import SparkplugSubscriber

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.outputs.sparkplug.node import SparkplugNode
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage

FORMATS = pytest.mark.parametrize("fmt", ["json", "sparkplug_b"])


def _result(i: int, pad: int = 300) -> OutMessage:
    body = {"id": f"r{i:06d}", "seq": i + 1, "source": "cam1", "pad": "x" * pad}
    return OutMessage("cam1/result", json.dumps(body).encode())


def _output(
    fmt: str, broker: BrokerProcess, prefix: str, spool: SpoolConfig, **kw: float
) -> tuple[Output, MqttPublisher]:
    """The output of format ``fmt`` (group ``prefix`` for Sparkplug B) and its publisher."""
    config = MqttConfig(url=broker.url, topic_prefix=prefix, keepalive=5, protocol=broker.protocol)
    if fmt == "json":
        pub = MqttPublisher(config, "edge-1", spool, **kw)  # type: ignore[arg-type]
        return pub, pub
    node = SparkplugNode(prefix, "edge-1", ["cam1"], spool.dir.parent / "bdseq")
    pub = MqttPublisher(config, "edge-1", spool, session=node, **kw)  # type: ignore[arg-type]
    return SparkplugOutput(pub, node), pub


def _subscriber(fmt: str, broker: BrokerProcess, prefix: str) -> Subscriber:
    """A subscriber with a persistent session to the results of format ``fmt``."""
    if fmt == "json":
        return Subscriber(broker.port, f"{prefix}/#", client_id=f"sub-{prefix}")
    return SparkplugSubscriber(broker.port, prefix, client_id=f"sub-{prefix}")


def _subscribed_then_down(broker: BrokerProcess, prefix: str, fmt: str = "json") -> Subscriber:
    """A subscriber with a persistent session; then the broker goes down.

    Mosquitto keeps the session across the restart, so messages that arrive before the
    subscriber is back are queued for it.
    """
    broker.start()
    sub = _subscriber(fmt, broker, prefix)
    broker.stop()
    return sub


@pytest.mark.slow
@FORMATS
def test_ten_second_outage_loses_no_result(tmp_path: Path, fmt: str) -> None:
    prefix = f"o{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker").start()
    sub = _subscriber(fmt, broker, prefix)
    out, pub = _output(fmt, broker, prefix, SpoolConfig(dir=tmp_path / "spool"), backoff_max=1.0)
    out.start()
    assert wait_until(lambda: pub.connected, 10)
    sent: list[str] = []
    durable: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            batch = [_result(i + k) for k in range(5)]
            sent.extend(f"r{i + k:06d}" for k in range(5))
            out.publish_batch(batch, lambda: durable.append(1))
            i += 5
            time.sleep(0.02)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(2.0)
        broker.stop()
        assert wait_until(lambda: not pub.connected, 10)
        time.sleep(10.0)  # the outage
        spooled_during_outage = pub.stats()["spooled"]
        broker.start()
        assert wait_until(lambda: pub.connected, 15)
        time.sleep(2.0)  # live traffic after the broker is back
    finally:
        stop.set()
        producer.join(10)
    expected = set(sent)
    assert wait_until(lambda: set(sub.ids()) >= expected, 60), len(expected - set(sub.ids()))
    ids = sub.ids()
    duplicates = len(ids) - len(set(ids))
    stats = pub.stats()
    print(
        f"[outage] {fmt} broker={broker.kind} sent={len(expected)} received={len(ids)} "
        f"duplicates={duplicates} spooled={stats['spooled']} drained={stats['drained']}"
    )
    assert set(ids) == expected  # nothing lost, nothing invented
    assert spooled_during_outage > 0 and stats["drained"] >= spooled_during_outage
    # the subscriber can see the last live message before its PUBACK reaches the publisher
    assert wait_until(lambda: len(durable) == len(sent) // 5, 10), len(durable)
    assert stats["dropped"] == 0
    out.stop()
    sub.close()
    broker.stop()


@FORMATS
def test_small_spool_drop_oldest_dropped_equals_missing(tmp_path: Path, fmt: str) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker")
    sub = _subscribed_then_down(broker, prefix, fmt)
    spool = SpoolConfig(dir=tmp_path / "spool", max_bytes=32 * 1024, policy="drop_oldest")
    out, pub = _output(fmt, broker, prefix, spool, backoff_max=0.5)
    out.start()
    total = 2000
    for i in range(0, total, 20):
        out.publish_batch([_result(i + k) for k in range(20)])
    stats = pub.stats()
    assert stats["spool_bytes"] <= 32 * 1024
    assert stats["dropped"] > 0
    broker.start()
    assert wait_until(lambda: pub.connected and pub.stats()["spool_records"] == 0, 20)
    kept = total - pub.stats()["dropped"]
    assert wait_until(lambda: len(set(sub.ids())) >= kept, 20)
    received = set(sub.ids())
    missing = total - len(received)
    print(
        f"[drop_oldest] {fmt} broker={broker.kind} sent={total} received={len(received)} "
        f"missing={missing} dropped={pub.stats()['dropped']}"
    )
    assert missing == pub.stats()["dropped"]
    # the newest survive, oldest first on the wire
    assert received == {f"r{i:06d}" for i in range(missing, total)}
    assert sub.ids()[: len(received)] == sorted(received)
    out.stop()
    sub.close()
    broker.stop()


@FORMATS
def test_block_policy_holds_the_producer_and_loses_nothing(tmp_path: Path, fmt: str) -> None:
    prefix = f"b{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker")
    sub = _subscribed_then_down(broker, prefix, fmt)
    spool = SpoolConfig(dir=tmp_path / "spool", max_bytes=16 * 1024, policy="block")
    out, pub = _output(fmt, broker, prefix, spool, backoff_max=0.5)
    out.start()
    total = 400
    durable: list[int] = []

    def produce() -> None:
        for i in range(0, total, 10):
            out.publish_batch([_result(i + k) for k in range(10)], lambda: durable.append(1))

    producer = threading.Thread(target=produce)
    producer.start()
    assert wait_until(lambda: pub.stats()["spool_bytes"] > 12 * 1024, 10)
    producer.join(1.0)
    assert producer.is_alive()  # held: the spool is full and nothing is dropped
    assert len(durable) < total // 10
    assert pub.stats()["spool_bytes"] <= 16 * 1024
    broker.start()
    producer.join(30)
    assert not producer.is_alive()
    assert wait_until(lambda: len(set(sub.ids())) == total, 30), len(set(sub.ids()))
    assert pub.stats()["dropped"] == 0
    # the subscriber can see the last message before its PUBACK reaches the publisher
    assert wait_until(lambda: len(durable) == total // 10, 10), len(durable)
    out.stop()
    sub.close()
    broker.stop()


def _run_proc(cfg: dict[str, object], path: Path) -> subprocess.Popen[str]:
    path.write_text(json.dumps(cfg))
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "mqtt_publisher_proc.py"), str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )


@FORMATS
def test_spool_survives_kill_9_and_drains_after_restart(tmp_path: Path, fmt: str) -> None:
    prefix = f"k{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker")
    sub = _subscribed_then_down(broker, prefix, fmt)
    spool = tmp_path / "spool"
    base = {
        "url": broker.url,
        "prefix": prefix,
        "device": "edge-1",
        "spool": str(spool),
        "protocol": broker.protocol,
        "format": fmt,
    }
    proc = _run_proc({**base, "count": 500, "then": "wait"}, tmp_path / "first.json")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("durable 500"), line
    assert json.loads(line.split(" ", 2)[2])["spool_records"] == 500
    os.kill(proc.pid, signal.SIGKILL)  # no clean shutdown, no cursor commit
    proc.wait(5)
    segments = sorted(spool.glob("*.seg"))
    assert segments and sum(p.stat().st_size for p in segments) > 500 * 20
    # and a torn record at the end, as a power cut in the middle of a write leaves it
    with open(segments[-1], "ab") as fh:
        fh.write(b"CDSP\x50\x00\x00\x00\x01\x02")
    broker.start()
    again = _run_proc({**base, "count": 0, "then": "drain"}, tmp_path / "second.json")
    assert again.stdout is not None
    out = again.stdout.readline() + again.stdout.readline()
    assert again.wait(30) == 0, out
    assert "drained" in out
    assert wait_until(lambda: len(set(sub.ids())) == 500, 20)
    assert set(sub.ids()) == {f"r{i}" for i in range(500)}
    print(f"[kill -9] {fmt} broker={broker.kind} received={len(sub.ids())} unique=500")
    sub.close()
    broker.stop()
