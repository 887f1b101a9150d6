"""The MQTT output with its spool on a full disk.

The I/O thread lives on, nothing is reported durable that is not, and everything arrives once
space and the broker return.
"""

from __future__ import annotations

import json
import textwrap
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import cam_config, jpeg, wait_for, write_atomic
from helpers.full_disk import FullDisk
from helpers.mqtt_brokers import BrokerProcess, Subscriber, broker_protocol, wait_until
from helpers.ports import free_port

import cdml_edge.outputs.mqtt.spool as spool_mod
from cdml_edge.agent.app import Agent
from cdml_edge.config import MqttConfig, OutboxConfig, SpoolConfig, load_config
from cdml_edge.outputs.mqtt.publisher import MqttPublisher, OutputUnavailable
from cdml_edge.window.topics import OutMessage


def _healthz(url: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _msgs(start: int, n: int) -> list[OutMessage]:
    return [
        OutMessage("cam1/result", json.dumps({"id": f"r{i}", "pad": "x" * 300}).encode())
        for i in range(start, start + n)
    ]


def _publisher(
    port: int, prefix: str, spool: Path, events: list[str], **kw: object
) -> MqttPublisher:
    return MqttPublisher(
        MqttConfig(
            url=f"mqtt://127.0.0.1:{port}",
            topic_prefix=prefix,
            keepalive=5,
            protocol=broker_protocol(),
        ),  # type: ignore[arg-type]
        "edge-1",
        SpoolConfig(dir=spool),  # type: ignore[call-arg]
        backoff_max=0.5,
        on_event=lambda kind, info: events.append(kind),
        **kw,  # type: ignore[arg-type]
    )


def test_spool_on_a_full_disk_holds_or_refuses_then_delivers_everything(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    port = free_port()  # the broker is away at first
    prefix = f"f{uuid.uuid4().hex[:8]}"
    events: list[str] = []
    pub = _publisher(
        port, prefix, full_disk.path / "spool", events, outbox=OutboxConfig(max_bytes=8 * 1024)
    )  # type: ignore[call-arg]
    pub.start()
    durable: list[int] = []
    pub.publish_batch(_msgs(0, 10), lambda: durable.append(0))
    assert durable == [0]  # spooled
    full_disk.fill()
    pub.publish_batch(_msgs(10, 10), lambda: durable.append(1))  # held in the outbox
    assert durable == [0] and pub.stats()["outbox_depth"] == 10
    assert events == ["spool_disk_full"] and pub.stats()["spool_degraded"] == 1
    with pytest.raises(OutputUnavailable, match="spool cannot take them"):
        pub.publish_batch(_msgs(20, 40), lambda: durable.append(2))  # outbox full too
    assert durable == [0] and pub.stats()["refused"] > 0
    assert wait_until(lambda: pub.stats()["connect_failures"] >= 2, 10)
    assert pub.stats()["io_thread_alive"] == 1
    full_disk.free()  # the I/O thread spools what the outbox held, by itself
    assert wait_until(lambda: durable == [0, 1], 10), durable
    assert events == ["spool_disk_full", "spool_disk_ok"]
    broker = BrokerProcess(tmp_path / "broker", port=port).start()
    try:
        sub = Subscriber(port, f"{prefix}/#")
        assert wait_until(lambda: pub.stats()["spool_records"] == 0, 20)
        pub.stop()
        ids = set(sub.ids())
        held = {f"r{i}" for i in range(20)}
        assert held <= ids  # the refused batch may have sent some, never reported durable
        sub.close()
    finally:
        broker.stop()


def test_a_batch_refused_in_part_calls_back_never(full_disk: FullDisk) -> None:
    """Refused (``OutputUnavailable``): the caller takes the window again, so nothing else.

    Part of the batch fitted in the outbox; once that part is spooled the batch used to fire
    ``on_given_up`` too: the agent then counted the window done twice and left its files
    in the folder for good, while it also took them again for the refusal.
    """
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    events: list[str] = []
    pub = _publisher(
        free_port(),
        f"f{uuid.uuid4().hex[:8]}",
        full_disk.path / "spool",
        events,
        outbox=OutboxConfig(max_bytes=8 * 1024),
    )
    pub.start()
    called: list[str] = []
    try:
        full_disk.fill()
        with pytest.raises(OutputUnavailable):  # 40 x ~380 B: half fits in the outbox
            pub.publish_batch(
                _msgs(0, 40), lambda: called.append("durable"), lambda: called.append("given up")
            )
        assert 0 < pub.stats()["outbox_depth"] < 40
        full_disk.free()  # the I/O thread spools what the outbox held
        assert wait_until(lambda: pub.stats()["outbox_depth"] == 0, 10)
        assert wait_until(lambda: pub.stats()["spool_degraded"] == 0, 10)
        assert called == [], called
    finally:
        pub.stop()


def test_a_full_disk_during_the_drain_does_not_kill_the_io_thread(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    """ENOSPC while the spool saved its read position killed the MQTT I/O thread for good.

    That was the issue's report. Now the cursor write fails, is retried, and delivery goes on.
    """
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    port = free_port()
    prefix = f"f{uuid.uuid4().hex[:8]}"
    events: list[str] = []
    pub = _publisher(port, prefix, full_disk.path / "spool", events)
    pub.start()
    done = threading.Event()
    pub.publish_batch(_msgs(0, 200), done.set)
    assert done.is_set()
    full_disk.fill()
    broker = BrokerProcess(tmp_path / "broker", port=port).start()
    try:
        sub = Subscriber(port, f"{prefix}/#")
        assert wait_until(lambda: len(set(sub.ids())) == 200, 30), len(set(sub.ids()))
        assert wait_until(lambda: "spool_disk_full" in events, 5)  # the cursor write failed
        assert pub.stats()["io_thread_alive"] == 1 and pub.connected
        pub.publish_batch(_msgs(200, 5))  # live results still flow
        assert wait_until(lambda: len(set(sub.ids())) == 205, 10)
        full_disk.free()
        assert wait_until(lambda: pub.stats()["spool_degraded"] == 0, 10)
        # the event follows the state change, from the thread whose write succeeded
        assert wait_until(lambda: events[-1] == "spool_disk_ok", 5), events[-3:]
        pub.stop()
        sub.close()
    finally:
        broker.stop()


def test_agent_keeps_source_files_while_the_spool_disk_is_full(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    """Broker away, spool disk full, outbox too small for a window: the window is refused.

    Its files stay (taken again every second); once space returns they are spooled and only then
    deleted.
    """
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    port = free_port()
    cfg_path = cam_config(
        tmp_path,
        textwrap.dedent(f"""\
        mqtt: {{url: "mqtt://127.0.0.1:{port}", protocol: "{broker_protocol()}"}}
        outbox: {{max_bytes: 512}}
        spool: {{dir: {full_disk.path / "spool"}}}
        health: {{interval: 0.5s, metrics_port: 0}}
    """),
        max_items=4,
    )
    cam = tmp_path / "in/cam1"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        full_disk.fill()
        for i in range(8):
            write_atomic(cam / f"f{i}.jpg", jpeg(i * 30, size=24))
        wait_for(lambda: agent.metrics.totals()["errors"] >= 2, 20, "refused windows")
        assert len(list(cam.iterdir())) == 8  # nothing released while nothing is safe
        assert agent.output.stats()["spool_degraded"] == 1
        assert agent._server is not None
        code, body = _healthz(agent._server.url)
        assert code == 503 and body["status"] == "degraded" and "spool" in body["degraded"]
        full_disk.free()
        wait_for(lambda: not any(cam.iterdir()), 30, "files released once spooled")
        assert agent.output.stats()["spool_records"] >= 8
        wait_for(lambda: _healthz(agent._server.url)[0] == 200, 10, "healthy again")
    finally:
        agent.stop()
