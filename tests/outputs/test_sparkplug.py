"""``mqtt.format: sparkplug_b`` against a real broker, read by an independent implementation.

Every message is decoded by ``pysparkplug`` and checked against a rule of the Sparkplug B
specification; each test is named after the rule it checks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.mqtt_brokers import (
    BrokerProcess,
    Subscriber,
    broker_protocol,
    wait_until,
)
from helpers.sparkplug import Received, SparkplugSubscriber, rebirth_command, send

from cdml_edge.config import AppConfig, parse_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage


def _config(tmp_path: Path, port: int, group: str, **mqtt: Any) -> AppConfig:
    return parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [
                {"name": s, "path": str(tmp_path / s), "modality": "image"}
                for s in ("cam1", "cam2")
            ],
            "mqtt": {
                "url": f"mqtt://127.0.0.1:{port}",
                "format": "sparkplug_b",
                "sparkplug": {"group_id": group},
                "protocol": broker_protocol(),
                "client_id": f"spb-{group}",
                "keepalive": 1,
                **mqtt,
            },
        }
    )


def _result(i: int, source: str = "cam1") -> OutMessage:
    doc = {
        "id": f"r{i:06d}",
        "window_id": "w1",
        "source": source,
        "item": f"img_{i}.jpg",
        "modality": "image",
        "ts": 1_700_000_000 + i,
        "label": "ok" if i % 2 else "scratch",
        "score": 0.5 + i / 10_000,
        "anomaly": i % 7 == 0,
        "anomaly_score": None if i % 3 else 0.25,
        "latency_ms": 1.5,
        "model": "m",
        "seq": i + 1,
        "device": "edge-1",
    }
    return OutMessage(f"{source}/result", json.dumps(doc).encode())


def _window() -> OutMessage:
    doc = {"window_id": "w1", "source": "cam2", "counts": {"ok": 3}, "items": 3, "errors": 0}
    doc |= {"opened_ts": 1.0, "closed_ts": 3.0, "seq": 1, "device": "edge-1"}
    return OutMessage("cam2/window", json.dumps(doc).encode())


def _start(cfg: AppConfig) -> SparkplugOutput:
    out = make_output(cfg)
    assert isinstance(out, SparkplugOutput)
    out.start()
    assert wait_until(lambda: out.publisher.connected, 10)
    return out


@pytest.fixture
def node(tmp_path: Path, broker_port: int) -> Iterator[tuple[AppConfig, SparkplugSubscriber]]:
    group = f"g{uuid.uuid4().hex[:8]}"
    sub = SparkplugSubscriber(broker_port, group, persistent=False)
    yield _config(tmp_path, broker_port, group), sub
    sub.close()


def _session(sub: SparkplugSubscriber, n: int) -> list[Received]:
    assert wait_until(lambda: len(sub.messages) >= n, 15), len(sub.messages)
    return sub.decoded()


def test_topics_follow_the_namespace_group_type_node_device(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    out.publish_batch([_result(0), _window()])
    got = _session(sub, 5)
    out.stop()
    group = cfg.mqtt.sparkplug.group_id
    for r in got:
        assert r.topic.namespace == "spBv1.0" and r.topic.group_id == group
        assert r.topic.edge_node_id == "edge-1"
        device = r.kind.startswith("D")
        assert (r.topic.device_id is not None) == device
    assert [(r.kind, r.topic.device_id) for r in got[:5]] == [
        ("NBIRTH", None),
        ("DBIRTH", "cam1"),
        ("DBIRTH", "cam2"),
        ("DDATA", "cam1"),
        ("DDATA", "cam2"),
    ]


def test_nbirth_first_with_seq_0_bdseq_and_rebirth_metric(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    got = _session(sub, 3)
    out.stop()
    first = got[0]
    assert first.kind == "NBIRTH" and first.payload.seq == 0
    metrics = first.metrics()
    assert metrics["Node Control/Rebirth"] is False
    assert isinstance(metrics["bdSeq"], int) and 0 <= metrics["bdSeq"] <= 255
    bd = next(m for m in first.payload.metrics if m.name == "bdSeq")
    assert bd.datatype.name == "INT64"


def test_dbirth_after_nbirth_and_before_any_ddata_of_its_device(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    out.publish_batch([_result(i, ("cam1", "cam2", "cam3")[i % 3]) for i in range(12)])
    got = _session(sub, 3 + 1 + 12)  # cam3 is new: a rebirth of all before its DDATA
    out.stop()
    born: set[str] = set()
    for r in got:
        if r.kind == "NBIRTH":
            born = set()
        elif r.kind == "DBIRTH":
            born.add(r.topic.device_id)
        elif r.kind == "DDATA":
            assert r.topic.device_id in born, r.topic
    assert {r.topic.device_id for r in got if r.kind == "DDATA"} == {"cam1", "cam2", "cam3"}


def test_seq_increments_by_one_per_message_and_wraps_after_255(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    for i in range(0, 300, 30):
        out.publish_batch([_result(i + k) for k in range(30)])
    got = _session(sub, 3 + 300)
    out.stop()
    seqs = [r.payload.seq for r in got if r.kind != "NDEATH"]
    assert seqs[0] == 0
    assert all(b == (a + 1) % 256 for a, b in zip(seqs, seqs[1:], strict=False)), seqs
    assert 255 in seqs and seqs.count(0) == 2  # wrapped once


def test_birth_metrics_have_name_alias_datatype_and_unique_aliases(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    out.publish_batch([_result(3)])
    got = _session(sub, 4)
    out.stop()
    aliases: list[int] = []
    for r in got[:3]:
        for m in r.payload.metrics:
            assert m.name and m.alias is not None and m.datatype.name != "UNKNOWN"
            assert m.value is not None or m.is_null
            aliases.append(m.alias)
    assert len(aliases) == len(set(aliases))  # unique across the node and its devices
    dbirth = got[1].metrics()
    for name in ("result/label", "result/anomaly_score", "window/items_per_s", "camera/state"):
        assert name in dbirth


def test_data_metrics_carry_aliases_only_resolved_by_the_birth(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    out.publish_batch([_result(21), _window()])
    got = _session(sub, 5)
    out.stop()
    ddata = [r for r in got if r.kind == "DDATA"]
    for r in ddata:
        assert all(m.alias is not None for m in r.payload.metrics)
    from pysparkplug import _protobuf

    raw = _protobuf.Payload.FromString(ddata[0].raw)  # no names, no types on the wire
    assert all(not m.HasField("name") and not m.datatype for m in raw.metrics)
    m = ddata[0].metrics()
    assert m["result/id"] == "r000021" and m["result/label"] == "ok"
    assert m["result/anomaly"] is True and m["result/anomaly_score"] == 0.25
    assert m["result/ts"].timestamp() == 1_700_000_021  # a DateTime: UTC ms
    w = ddata[1].metrics()
    assert w["window/items"] == 3 and w["window/items_per_s"] == 1.5
    assert json.loads(w["window/counts"]) == {"ok": 3}


def test_births_qos_0_not_retained_ndeath_on_clean_stop_with_the_births_bdseq(
    node: Any, broker_port: int
) -> None:
    cfg, sub = node
    out = _start(cfg)
    camera = {"source": "cam2", "state": "reconnecting", "previous": "streaming", "outages": 1}
    camera |= {"reconnects": 0, "failed_attempts": 1, "url": "rtsp://c", "ts": 1.0, "seq": 1}
    retained = OutMessage("cam2/camera", json.dumps(camera).encode(), retain=True)  # in JSON
    out.publish_batch([_result(0), retained])
    _session(sub, 5)
    out.stop()
    got = _session(sub, 6)
    assert got[4].kind == "DDATA" and got[4].metrics()["camera/state"] == "reconnecting"
    late = Subscriber(broker_port, f"spBv1.0/{cfg.mqtt.sparkplug.group_id}/#", persistent=False)
    time.sleep(0.5)
    late.close()
    assert late.messages == []  # nothing retained
    births = [r for r in got if r.kind.endswith("BIRTH")]
    assert all(r.qos == 0 and not r.retain for r in births)
    assert not any(r.retain for r in got)
    death = got[-1]
    assert death.kind == "NDEATH" and death.qos == 1
    assert death.payload.bd_seq_metric.value == got[0].metrics()["bdSeq"]
    from pysparkplug import _protobuf

    assert not _protobuf.Payload.FromString(death.raw).HasField("seq")


def test_ndeath_will_after_kill_9_matches_the_nbirth_bdseq(
    node: Any, tmp_path: Path, broker_port: int
) -> None:
    cfg, sub = node
    script = tmp_path / "node.py"
    script.write_text(
        "import time\n"
        "from cdml_edge.config import parse_config\n"
        "from cdml_edge.outputs.factory import make_output\n"
        f"out = make_output(parse_config({cfg.model_dump(mode='json')!r}))\n"
        "out.start()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        _session(sub, 3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        got = _session(sub, 4)
    finally:
        proc.kill()
        proc.wait(5)
    death = got[-1]
    assert death.kind == "NDEATH" and death.qos == 1 and not death.retain  # the will's
    assert death.payload.bd_seq_metric.value == got[0].metrics()["bdSeq"]


def test_bdseq_is_one_up_with_every_connect_across_restarts(node: Any) -> None:
    cfg, sub = node
    bdseqs = []
    for _ in range(3):
        before = len(sub.messages)
        out = _start(cfg)
        got = _session(sub, before + 3)
        bdseqs.append([r for r in got if r.kind == "NBIRTH"][-1].metrics()["bdSeq"])
        out.stop()
        assert wait_until(lambda: sub.decoded()[-1].kind == "NDEATH", 5)
    assert bdseqs[1] == (bdseqs[0] + 1) % 256 and bdseqs[2] == (bdseqs[1] + 1) % 256


def test_ncmd_node_control_rebirth_publishes_nbirth_seq_0_same_bdseq(
    node: Any, broker_port: int
) -> None:
    cfg, sub = node
    out = _start(cfg)
    out.publish_batch([_result(1)])
    first = _session(sub, 4)
    send(broker_port, f"spBv1.0/{cfg.mqtt.sparkplug.group_id}/NCMD/edge-1", rebirth_command())
    got = _session(sub, 8)  # the command and the births
    out.publish_batch([_result(2)])
    got = _session(sub, 9)
    out.stop()
    reborn = [r for r in got if r.kind != "NCMD"][4:]
    assert [r.kind for r in reborn] == ["NBIRTH", "DBIRTH", "DBIRTH", "DDATA"]
    assert reborn[0].payload.seq == 0 and [r.payload.seq for r in reborn] == [0, 1, 2, 3]
    assert reborn[0].metrics()["bdSeq"] == first[0].metrics()["bdSeq"]
    assert reborn[1].metrics()["result/id"] == "r000001"  # the birth holds the last values


def test_store_and_forward_data_drained_from_the_spool_is_historical(tmp_path: Path) -> None:
    group = f"g{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker").start()
    sub = SparkplugSubscriber(broker.port, group, client_id=f"sub-{group}")  # persistent
    broker.stop()
    cfg = _config(tmp_path, broker.port, group, protocol=broker.protocol)
    out = make_output(cfg)
    assert isinstance(out, SparkplugOutput)
    out.start()
    try:
        out.publish_batch([_result(i) for i in range(5)])  # the broker is away: spooled
        assert out.publisher.stats()["spooled"] == 5
        broker.start()
        assert wait_until(lambda: out.publisher.connected, 15)
        assert wait_until(lambda: out.publisher.stats()["spool_records"] == 0, 15)
        out.publish_batch([_result(i) for i in range(5, 8)])  # live
        assert wait_until(lambda: len(sub.ids()) >= 8, 15)
    finally:
        out.stop()
        sub.close()
        broker.stop()
    flags = {}
    for r in sub.decoded():
        if r.kind == "DDATA":
            metrics = list(r.payload.metrics)
            flags[r.metrics()["result/id"]] = {m.is_historical for m in metrics}
    assert all(flags[f"r{i:06d}"] == {True} for i in range(5))
    assert all(flags[f"r{i:06d}"] == {False} for i in range(5, 8))


def test_health_is_ndata_and_status_is_left_to_the_births(node: Any) -> None:
    cfg, sub = node
    out = _start(cfg)
    health = {"items": 5, "windows": 2, "broker_connected": True, "seq": 1, "device": "edge-1"}
    status = {"state": "online", "version": "x", "started_at": 1.0, "device": "edge-1"}
    done: list[int] = []
    out.publish_batch([OutMessage("status", json.dumps(status).encode())], lambda: done.append(1))
    out.publish_batch([OutMessage("health", json.dumps(health).encode())])
    got = _session(sub, 4)
    out.stop()
    assert done == [1]  # nothing to send is durable at once
    ndata = [r for r in got if r.kind == "NDATA"]
    assert len(ndata) == 1 and ndata[0].metrics()["health/items"] == 5
    assert ndata[0].metrics()["health/broker_connected"] is True


def test_without_protobuf_run_refuses_the_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "f.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nmqtt: {{format: sparkplug_b}}\n")
    code = (
        "import sys; sys.modules['google.protobuf'] = None\n"  # as if it were not installed
        f"sys.argv = ['cdml-edge', 'run', '--config', {str(config)!r}]\n"
        "from cdml_edge.cli import app; app()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"cdml-edge run: {config}: mqtt.format: sparkplug_b needs the protobuf package: "
        "pip install 'cdml-edge[sparkplug]'"
    )


def test_a_malformed_ncmd_is_logged_and_asks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """Bytes that are no Sparkplug B payload: a warning, no rebirth, no exception."""
    from cdml_edge.outputs.sparkplug.node import SparkplugNode

    node = SparkplugNode("g", "edge-1", ["cam1"])
    node.on_command(node.command_topic, b"\xff\xff\xff not protobuf")
    assert not node.rebirth_due()
    assert "not a Sparkplug B payload" in caplog.text


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_the_edge_node_connects_with_a_clean_session_so_the_broker_keeps_none(
    tmp_path: Path, broker_port: int, protocol: str
) -> None:
    """Sparkplug B 3.0: Clean Session true (3.1.1), Clean Start true and expiry 0 (5).

    A QoS 1 NCMD sent while the node is offline must not reach it when it connects again:
    a broker that kept a session for the node would deliver it first, before a command sent
    once the node is back. So once that second command arrived, the first never will.
    """
    if broker_protocol() != "5" and protocol == "5":
        pytest.skip("the test broker speaks MQTT 3.1.1 only")
    group = f"g{uuid.uuid4().hex[:8]}"
    sub = SparkplugSubscriber(broker_port, group, persistent=False)
    cfg = _config(tmp_path, broker_port, group, protocol=protocol)
    ncmd = f"spBv1.0/{group}/NCMD/edge-1"
    try:
        _start(cfg).stop()  # the node's first session, subscribed to its NCMD
        send(broker_port, ncmd, b"sent while offline")
        out = make_output(cfg)
        assert isinstance(out, SparkplugOutput)
        seen: list[bytes] = []
        out.node.on_command = lambda topic, raw: seen.append(raw)  # type: ignore[method-assign]
        births = lambda: sum("/NBIRTH/" in t for t, _p, _r in list(sub.messages))  # noqa: E731
        before = births()
        out.start()
        assert wait_until(lambda: births() > before, 10)  # subscribed again (before its births)
        send(broker_port, ncmd, b"sent once back")
        assert wait_until(lambda: b"sent once back" in seen, 10), seen
        out.stop()
        assert seen == [b"sent once back"], "the broker kept a session for the node"
    finally:
        sub.close()
