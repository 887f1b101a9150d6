"""An output that fails for a while: each result is delivered once, each item counted once.

The failing output is a real JSON-lines file whose disk is full (``out.jsonl`` a link to
``/dev/full``: every write fails with ENOSPC in the kernel), made to work again by putting a
regular file at the path (the output follows it, as after logrotate). Beside it, a real
Mosquitto and a subscriber counting what it gets.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import yaml
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic, write_config
from paho.mqtt.enums import CallbackAPIVersion

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.outputs.factory import leaves
from cdml_edge.outputs.jsonl import JsonlOutput

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")

FILES = ("a.jpg", "b.jpg", "c.jpg")


def _full_disk(path: Path) -> None:
    """``path`` on a full disk: every write to it fails with ENOSPC."""
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/full")


def _room_again(path: Path) -> None:
    """A regular file at ``path`` again (the output opens it at its next write)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(b"")
    os.replace(tmp, path)


def _jsonl_failed(agent: Agent) -> int:
    return sum(o.stats()["failed"] for o in leaves(agent.output) if isinstance(o, JsonlOutput))


def _config(tmp_path: Path, mqtt_prefix: str | None) -> Path:
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"] = doc["sources"][:1]  # cam: windows of up to 8 images
    if mqtt_prefix is not None:
        doc["mqtt"] = {
            "url": "mqtt://127.0.0.1:1883",
            "topic_prefix": mqtt_prefix,
            "client_id": mqtt_prefix,
        }
        doc["spool"] = {"dir": "spool"}
    cfg_path.write_text(yaml.safe_dump(doc))
    return cfg_path


def _run_through_a_full_disk(tmp_path: Path, cfg_path: Path, refusals: int) -> Agent:
    """Start the agent on a full disk, drop :data:`FILES`, free it after ``refusals``.

    Returns once every file is finished (deleted), with the agent stopped.
    """
    out, cam = tmp_path / "out.jsonl", tmp_path / "in/cam"
    _full_disk(out)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for i, name in enumerate(FILES):
            write_atomic(cam / name, jpeg(20 + 100 * i))
        wait_for(
            lambda: _jsonl_failed(agent) >= refusals * len(FILES),
            timeout=30,
            what=f"{refusals} refused writes of the window",
        )
        _room_again(out)
        wait_for(lambda: not any(cam.iterdir()), timeout=60, what="the files finished")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) >= len(FILES), what="the results")
    finally:
        agent.stop()
    return agent


def test_a_tee_retry_gives_the_window_only_to_the_part_that_failed(
    tmp_path: Path, models: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    got: list[dict[str, Any]] = []
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{prefix}")
    sub.on_message = lambda c, u, m: (
        got.append(json.loads(m.payload)) if m.topic.endswith("/result") else None
    )
    sub.connect("127.0.0.1", 1883)
    sub.subscribe(f"{prefix}/#", qos=1)
    sub.loop_start()
    try:
        _run_through_a_full_disk(tmp_path, _config(tmp_path, prefix), refusals=3)
    finally:
        sub.loop_stop()
        sub.disconnect()
    in_file = [r["item"] for r in of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")]
    on_broker = [r["item"] for r in got]
    assert sorted(in_file) == sorted(FILES), in_file
    assert sorted(on_broker) == sorted(FILES), f"the subscriber got duplicates: {on_broker}"
    by_id = {r["id"]: r["seq"] for r in got}
    file_seq = {r["id"]: r["seq"] for r in of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")}
    assert by_id == file_seq  # the same messages in both: the file got what the broker got


def test_items_of_windows_the_output_refused_are_counted_once(tmp_path: Path, models: Path) -> None:
    agent = _run_through_a_full_disk(tmp_path, _config(tmp_path, None), refusals=2)
    results = of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")
    assert sorted(r["item"] for r in results) == sorted(FILES)
    totals = agent.metrics.totals()
    assert totals["items"] == len(FILES), f"{totals['items']} items counted for {len(FILES)}"
    assert agent.metrics.anomaly_count() == sum(r["anomaly"] for r in results)
    published = [
        s.value
        for family in agent.metrics.item_latency.collect()
        for s in family.samples
        if s.name.endswith("_count")
    ]
    assert sum(published) == len(FILES), f"{sum(published)} results published for {len(FILES)}"
    line = agent.health.summary.final(agent.health._payload(seq=0), agent.metrics.anomaly_count())
    assert f": {len(FILES)} items" in line, line
