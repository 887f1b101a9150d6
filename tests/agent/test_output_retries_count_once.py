"""An output that fails for a while: each result is delivered once, each item counted once.

The failing output is a real JSON-lines file whose disk is full (``out.jsonl`` a link to
``/dev/full``: every write fails with ENOSPC in the kernel), made to work again by putting a
regular file at the path (the output follows it, as after logrotate). Beside it, a real
Mosquitto and a subscriber counting what it gets.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from helpers.agent_runs import of_kind, read_jsonl
from helpers.full_disk_runs import FILES, config, run_through_a_full_disk
from paho.mqtt.enums import CallbackAPIVersion

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


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
        run_through_a_full_disk(tmp_path, config(tmp_path, prefix), refusals=3)
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
    agent = run_through_a_full_disk(tmp_path, config(tmp_path, None), refusals=2)
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
