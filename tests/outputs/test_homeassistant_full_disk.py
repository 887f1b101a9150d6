"""Home Assistant discovery at start while the spool disk is full and the outbox overflows.

The configs must not fail the start: what the publisher refuses is held and offered again
until it is taken, counted, and logged once; the broker gets every config in the end.
"""

from __future__ import annotations

import logging
import textwrap
import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import cam_config
from helpers.full_disk import FullDisk
from helpers.mqtt_brokers import BrokerProcess, Subscriber, broker_protocol, wait_until
from helpers.ports import free_port

import cdml_edge.outputs.mqtt.spool as spool_mod
from cdml_edge.agent.app import Agent
from cdml_edge.config import AppConfig, load_config, parse_config
from cdml_edge.outputs.homeassistant import announce, discovery_configs
from cdml_edge.outputs.mqtt.publisher import MqttPublisher

SOURCES = [f"cam{i}" for i in range(12)]  # 61 configs, far more than the outbox takes


def _config(tmp_path: Path, port: int, spool: Path) -> AppConfig:
    tag = uuid.uuid4().hex[:8]
    return parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [
                {"name": s, "path": str(tmp_path / s), "modality": "image"} for s in SOURCES
            ],
            "outbox": {"max_bytes": 4096},
            "spool": {"dir": str(spool)},
            "mqtt": {
                "url": f"mqtt://127.0.0.1:{port}",
                "topic_prefix": f"p{tag}",
                "discovery": "homeassistant",
                "discovery_prefix": f"ha{tag}",
                "protocol": broker_protocol(),
                "client_id": f"ha-{tag}",
            },
        }
    )


def _publisher(cfg: AppConfig) -> MqttPublisher:
    assert cfg.mqtt is not None
    return MqttPublisher(cfg.mqtt, cfg.device.id, cfg.spool, cfg.outbox, backoff_max=0.5)


def test_announce_on_a_full_spool_disk_holds_the_configs_and_never_raises(
    full_disk: FullDisk, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    port = free_port()  # the broker is away at first: everything goes to the spool
    cfg = _config(tmp_path, port, full_disk.path / "spool")
    pub = _publisher(cfg)
    pub.start()
    broker: BrokerProcess | None = None
    try:
        full_disk.fill()
        with caplog.at_level(logging.WARNING, logger="cdml_edge.outputs.homeassistant"):
            sent = announce(cfg, [pub], retry_min=0.05, retry_max=0.1)  # must not raise
            assert sent == len(discovery_configs(cfg))
            assert wait_until(lambda: pub.stats()["discovery_retries"] >= 3, 10), pub.stats()
        assert pub.stats()["discovery_held"] == sent
        held_lines = [r for r in caplog.records if r.name == "cdml_edge.outputs.homeassistant"]
        assert len(held_lines) == 1, [r.getMessage() for r in held_lines]  # logged once
        full_disk.free()
        assert wait_until(lambda: pub.stats()["discovery_held"] == 0, 10), pub.stats()
        broker = BrokerProcess(tmp_path / "broker", port=port).start()
        assert cfg.mqtt is not None
        sub = Subscriber(port, f"{cfg.mqtt.discovery_prefix}/#", persistent=False)
        want = {t for t in discovery_configs(cfg)}
        assert wait_until(lambda: want <= {t for t, _, _ in sub.messages}, 20)
        sub.close()
    finally:
        full_disk.free()
        pub.stop(timeout=1)
        if broker is not None:
            broker.stop()


def test_the_agent_starts_with_its_spool_disk_full_and_discovery_on(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    """Broker away, spool disk full, an outbox smaller than the configs: the start goes on."""
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    tag = uuid.uuid4().hex[:8]
    cfg_path = cam_config(
        tmp_path,
        textwrap.dedent(f"""\
        mqtt: {{url: "mqtt://127.0.0.1:{free_port()}", protocol: "{broker_protocol()}",
               discovery: homeassistant, discovery_prefix: ha{tag}, topic_prefix: p{tag}}}
        outbox: {{max_bytes: 512}}
        spool: {{dir: {full_disk.path / "spool"}}}
        health: {{metrics_port: 0}}
    """),
    )
    agent = Agent(load_config(cfg_path), cfg_path)
    full_disk.fill()
    try:
        agent.start()  # used to raise OutputUnavailable
        assert agent.output.stats()["discovery_held"] > 0
    finally:
        full_disk.free()
        agent.stop()
