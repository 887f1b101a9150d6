"""The JSON Schemas `cdml-edge config schema --payloads` prints hold for what a real agent sends.

A subscriber that validates each message against the published schemas (as an integrator's
Node-RED flow or historian loader does) must never reject one: the agent runs as a process
against a real Mosquitto, scores real files, fails on a broken one, reports health and
stops; every message it published and every line of its JSON-lines file is validated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
from helpers.agent_runs import cam_config, jpeg, start_agent, wait_for, write_atomic
from helpers.mqtt_brokers import Subscriber, broker_protocol


def _schemas() -> dict[str, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "config", "schema", "--payloads"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    schemas: dict[str, dict[str, object]] = json.loads(proc.stdout)
    return schemas


def test_every_message_of_a_real_run_validates_against_the_published_schemas(
    tmp_path: Path, broker_port: int
) -> None:
    prefix = f"schema{uuid.uuid4().hex[:8]}"
    cfg = cam_config(
        tmp_path,
        f"mqtt: {{url: 'mqtt://127.0.0.1:{broker_port}', topic_prefix: {prefix}, "
        f"protocol: '{broker_protocol()}', client_id: {prefix}}}\n"
        "output: {jsonl: out.jsonl}\n"
        "health: {interval: 0.3s}\n",
    )
    sub = Subscriber(broker_port, f"{prefix}/#", persistent=False)
    agent = start_agent(cfg, tmp_path / "agent.log", cwd=tmp_path)
    try:
        for i, value in enumerate((20, 230, 128)):
            write_atomic(tmp_path / "in/cam1" / f"img_{i}.jpg", jpeg(value))
        write_atomic(tmp_path / "in/cam1" / "broken.jpg", b"not a jpeg at all")
        wait_for(lambda: len(sub.on("/result")) >= 3, 60, "three results")
        wait_for(lambda: bool(sub.on("/error") and sub.on("/health")), 30, "an error and health")
    finally:
        os.kill(agent.pid, signal.SIGTERM)
        agent.wait(30)
        sub.close()
    assert agent.returncode == 0, (tmp_path / "agent.log").read_text()[-3000:]
    schemas = _schemas()
    seen: dict[str, int] = {}
    for topic, payload, _ in sub.messages:
        kind = topic.rsplit("/", 1)[1]
        jsonschema.validate(json.loads(payload), schemas[kind])
        seen[kind] = seen.get(kind, 0) + 1
    assert {"status", "result", "window", "error", "health"} <= set(seen), seen
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    for line in lines:
        record = json.loads(line)
        jsonschema.validate(record["payload"], schemas[record["topic"].rsplit("/", 1)[1]])
    assert len(lines) >= seen["result"] + seen["window"] + seen["error"]
