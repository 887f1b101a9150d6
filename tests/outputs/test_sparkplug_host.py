"""What a Sparkplug B host application sees of the edge node across restarts and commands.

A host (Ignition, HiveMQ's Sparkplug tools) resolves each DDATA's aliases with the last
DBIRTH of that device, and asks for a rebirth when a device sends data it never saw born.
These tests play such a host with ``pysparkplug`` against a real Mosquitto: data kept in the
spool while the broker was away and delivered by the next run of the agent, a run whose
configuration lists its sources in another order, and commands that name a metric by its
alias only (which the specification allows once the birth gave the alias).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pysparkplug as spb
from helpers.mqtt_brokers import BrokerProcess, wait_until
from helpers.sparkplug import SparkplugSubscriber, send
from pysparkplug import _protobuf

from cdml_edge.config import AppConfig, parse_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage


def _config(tmp_path: Path, port: int, group: str, sources: list[str], protocol: str) -> AppConfig:
    return parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [
                {"name": s, "path": str(tmp_path / s), "modality": "image"} for s in sources
            ],
            "mqtt": {
                "url": f"mqtt://127.0.0.1:{port}",
                "format": "sparkplug_b",
                "sparkplug": {"group_id": group},
                "protocol": protocol,
                "client_id": f"spb-{group}",
                "keepalive": 1,
            },
        }
    )


def _result(i: int, source: str) -> OutMessage:
    doc: dict[str, Any] = {
        "id": f"{source}-{i}",
        "window_id": "w1",
        "source": source,
        "item": f"img_{i}.jpg",
    }
    doc |= {"modality": "image", "ts": 1_700_000_000 + i, "label": f"L{i}", "score": 0.5}
    doc |= {"anomaly": False, "latency_ms": 1.0, "model": "m", "seq": i + 1, "device": "edge-1"}
    return OutMessage(f"{source}/result", json.dumps(doc).encode())


def _agent_error() -> OutMessage:
    doc: dict[str, Any] = {
        "source": "agent",
        "item": None,
        "error_type": "ThreadDied",
        "message": "mqtt-io died",
    }
    doc |= {"ts": 1_700_000_000.0, "seq": 1, "device": "edge-1"}
    return OutMessage("agent/error", json.dumps(doc).encode())


def _host_view(sub: SparkplugSubscriber) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Each message as a host reads it: kind, device, metrics by name (aliases resolved).

    A DDATA whose device has no DBIRTH since the node's last NBIRTH, or one of whose aliases
    that birth does not define, fails the test: a host cannot use it.
    """
    with sub._lock:  # noqa: SLF001 - the raw messages, in arrival order
        raw = list(sub.messages)
    births: dict[str | None, dict[int, tuple[str, Any]]] = {}
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    for topic_str, payload, _ in raw:
        topic = spb.Topic.from_str(topic_str)
        kind = str(topic.message_type)
        device = None if topic.device_id is None else str(topic.device_id)
        decoded = _protobuf.Payload.FromString(payload)
        if kind == "NBIRTH":
            births = {}
        if kind in ("NBIRTH", "DBIRTH"):
            births[device] = {m.alias: (m.name, m.datatype) for m in decoded.metrics}
            out.append((kind, device, {m.name: m for m in decoded.metrics}))
        elif kind in ("DDATA", "NDATA"):
            assert device in births, f"{kind} of {device!r} before its birth: {topic_str}"
            known = births[device]
            missing = [m.alias for m in decoded.metrics if m.alias not in known]
            assert not missing, f"{topic_str}: aliases {missing} not in the device's birth"
            out.append((kind, device, {known[m.alias][0]: m for m in decoded.metrics}))
        else:
            out.append((kind, device, {}))
    return out


def _spool_then_restart(
    tmp_path: Path, first: list[str], second: list[str], batch: list[OutMessage]
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """What a host sees of ``batch`` kept in the spool by one run, delivered by the next.

    The first run is configured with the sources ``first`` and finds the broker away; the
    next, configured with ``second``, finds it back.
    """
    group = f"g{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker").start()
    broker.stop()
    out = make_output(_config(tmp_path, broker.port, group, first, broker.protocol))
    assert isinstance(out, SparkplugOutput)
    out.start()
    out.publish_batch(batch)
    assert out.publisher.stats()["spooled"] == len(batch)
    out.stop(timeout=0.5)
    broker.start()
    sub = SparkplugSubscriber(broker.port, group, persistent=False)
    out = make_output(_config(tmp_path, broker.port, group, second, broker.protocol))
    assert isinstance(out, SparkplugOutput)
    out.start()
    try:
        n = len(batch)
        assert wait_until(lambda: sum(1 for t, _, _ in sub.messages if "/DDATA/" in t) >= n, 20)
        return _host_view(sub)
    finally:
        out.stop()
        sub.close()
        broker.stop()


def test_a_device_born_at_run_time_is_born_before_its_data_drained_by_the_next_run(
    tmp_path: Path,
) -> None:
    """The ``agent`` device (an agent-wide error) and a source not configured (cam3)."""
    view = _spool_then_restart(
        tmp_path, ["cam1"], ["cam1"], [_agent_error(), _result(1, "cam3"), _result(2, "cam1")]
    )
    ddata = {d: m for k, d, m in view if k == "DDATA"}
    assert set(ddata) == {"agent", "cam3", "cam1"}
    assert ddata["agent"]["error/type"].string_value == "ThreadDied"
    assert ddata["cam3"]["result/id"].string_value == "cam3-1"
    assert all(m.is_historical for m in ddata["cam3"].values())


def test_data_spooled_before_the_sources_were_reordered_reads_as_it_was_sent(
    tmp_path: Path,
) -> None:
    view = _spool_then_restart(
        tmp_path, ["cam1", "cam2"], ["cam2", "cam1"], [_result(1, "cam1"), _result(2, "cam2")]
    )
    ddata = {d: m for k, d, m in view if k == "DDATA"}
    assert ddata["cam1"]["result/id"].string_value == "cam1-1"
    assert ddata["cam2"]["result/id"].string_value == "cam2-2"
    assert ddata["cam2"]["result/label"].string_value == "L2"


def test_aliases_of_a_device_stay_the_same_across_restarts(tmp_path: Path) -> None:
    """A host that caches aliases by device (as Ignition does) keeps reading them right."""
    group = f"g{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker").start()
    sub = SparkplugSubscriber(broker.port, group, persistent=False)
    births: list[dict[str, dict[str, int]]] = []
    try:
        for sources in (["cam1", "cam2"], ["cam0", "cam2", "cam1"], ["cam2"]):
            before = len(sub.messages)
            out = make_output(_config(tmp_path, broker.port, group, sources, broker.protocol))
            out.start()
            want = before + 1 + len(sources)
            assert wait_until(lambda w=want: len(sub.messages) >= w, 15)
            out.stop()
            assert wait_until(lambda: "/NDEATH/" in sub.messages[-1][0], 10)
            run = _host_view(sub)[before:]
            births.append(
                {
                    d: {name: m.alias for name, m in metrics.items()}
                    for k, d, metrics in run
                    if k == "DBIRTH" and d is not None
                }
            )
    finally:
        sub.close()
        broker.stop()
    assert births[1]["cam1"] == births[0]["cam1"] and births[1]["cam2"] == births[0]["cam2"]
    assert births[2]["cam2"] == births[0]["cam2"]
    every = [a for run in births[1:2] for dev in run.values() for a in dev.values()]
    assert len(every) == len(set(every))  # still unique across the node


def _alias_only_rebirth(alias: int) -> bytes:
    """An NCMD naming ``Node Control/Rebirth`` by the alias its NBIRTH gave, no name."""
    payload = _protobuf.Payload(timestamp=int(time.time() * 1000))
    metric = payload.metrics.add(alias=alias, timestamp=payload.timestamp, datatype=11)
    metric.boolean_value = True
    return bytes(payload.SerializeToString())


def test_ncmd_rebirth_naming_the_metric_by_its_alias_only(tmp_path: Path) -> None:
    group = f"g{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker").start()
    sub = SparkplugSubscriber(broker.port, group, persistent=False)
    out = make_output(_config(tmp_path, broker.port, group, ["cam1"], broker.protocol))
    out.start()
    try:
        assert wait_until(lambda: len(sub.messages) >= 2, 15)
        nbirth = _host_view(sub)[0]
        assert nbirth[0] == "NBIRTH"
        alias = nbirth[2]["Node Control/Rebirth"].alias
        send(broker.port, f"spBv1.0/{group}/NCMD/edge-1", _alias_only_rebirth(alias))
        assert wait_until(
            lambda: [t for t, _, _ in sub.messages].count(f"spBv1.0/{group}/NBIRTH/edge-1") == 2, 10
        ), [t for t, _, _ in sub.messages]
    finally:
        out.stop()
        sub.close()
        broker.stop()
