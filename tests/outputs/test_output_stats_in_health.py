"""The health message says what the output's own counters say of a part that is not working.

``discovery_held`` and ``discovery_retries`` (Home Assistant configs the publisher refused,
offered again) and ``reopen_failed`` (a JSON-lines path that names no file the output can
make: the lines go on in the file it had open) were in the output's stats alone: the health
message (and ``/healthz``) said the agent was fine meanwhile. They are in its ``degraded``
now, with the counts, while it lasts.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

from helpers.agent_runs import cam_config, read_jsonl
from helpers.full_disk import FullDisk
from helpers.mqtt_brokers import broker_protocol, wait_until
from helpers.ports import free_port

import cdml_edge.outputs.mqtt.spool as spool_mod
from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _degraded(agent: Agent) -> dict[str, str]:
    last = agent.health.last
    return {} if last is None else dict(last.degraded)


def test_discovery_configs_held_are_in_the_health_message(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    """Broker away, spool disk full, an outbox smaller than the configs."""
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
        health: {{metrics_port: 0, interval: 0.2s}}
    """),
    )
    agent = Agent(load_config(cfg_path), cfg_path)
    full_disk.fill()
    try:
        agent.start()
        held = agent.output.stats()["discovery_held"]
        assert held > 0
        assert wait_until(lambda: "discovery" in _degraded(agent), 20), _degraded(agent)
        said = _degraded(agent)["discovery"]
        assert f"{held} Home Assistant discovery configs held" in said, said
        assert "retries so far" in said, said
        full_disk.free()  # the spool takes them: health says so no more
        assert wait_until(lambda: agent.output.stats()["discovery_held"] == 0, 20)
        assert wait_until(lambda: "discovery" not in _degraded(agent), 20), _degraded(agent)
    finally:
        full_disk.free()
        agent.stop()


def _health_lines(path: Path) -> list[dict[str, Any]]:
    return [r["payload"] for r in read_jsonl(path) if r["topic"].endswith("/health")]


def test_a_jsonl_path_that_names_no_file_is_in_the_health_message(tmp_path: Path) -> None:
    cfg_path = cam_config(
        tmp_path, "output: {jsonl: out.jsonl}\nhealth: {metrics_port: 0, interval: 0.2s}\n"
    )
    out = tmp_path / "out.jsonl"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        assert wait_until(lambda: len(_health_lines(out)) >= 1, 20)
        out.rename(tmp_path / "old.jsonl")
        out.mkdir()  # no file can be made at the path: the lines go on in old.jsonl
        old = tmp_path / "old.jsonl"
        assert wait_until(
            lambda: any("jsonl" in h.get("degraded", {}) for h in _health_lines(old)), 20
        ), _health_lines(old)[-1:]
        said = next(h["degraded"]["jsonl"] for h in _health_lines(old) if h.get("degraded"))
        assert "cannot be made again" in said and "batches so" in said, said
        out.rmdir()  # a file at the path again: health says so no more
        assert wait_until(
            lambda: (h := _health_lines(out)) != [] and "jsonl" not in h[-1].get("degraded", {}),
            20,
        ), json.dumps(_health_lines(out)[-1:])
    finally:
        agent.stop()
