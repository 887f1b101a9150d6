"""``mqtt.results``: the whole agent publishing to the real Mosquitto in both modes.

``item`` (the default): a result message per item beside each window message, as always.
``window``: no result message; each window message carries its items' results, every item
exactly once, and the files are finished once those window messages are acknowledged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import jpeg, wait_for, write_atomic, write_config
from helpers.mqtt_brokers import SHARED_PORT, port_open

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

pytestmark = pytest.mark.broker

IMAGES = {f"p{i}.jpg": 20 + 40 * i for i in range(6)}  # <128 dark, else bright
CSVS = {"quiet.csv": 0.0, "loud.csv": 1.0}


class _Heard:
    """A QoS 1 subscriber to ``{prefix}/#``: every (topic below the device, payload)."""

    def __init__(self, prefix: str) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.prefix, self.base = prefix, f"{prefix}/test-dev/"
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{prefix}")
        self.client.on_message = lambda c, u, m: self.got.append(
            (m.topic.removeprefix(self.base), json.loads(m.payload))
        )
        self.client.connect("127.0.0.1", SHARED_PORT)
        self.client.subscribe(f"{prefix}/#", qos=1)
        self.client.loop_start()

    def on(self, topic: str) -> list[dict[str, Any]]:
        return [p for t, p in list(self.got) if t == topic]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def heard() -> Iterator[_Heard]:
    if not port_open(SHARED_PORT):
        pytest.fail("Mosquitto is not listening on 127.0.0.1:1883 (.ci/run starts it)")
    sub = _Heard(f"t{uuid.uuid4().hex[:8]}")
    yield sub
    sub.close()


def _csv(level: float) -> bytes:
    rows = "\n".join(f"{level:.2f},{level:.2f},{level:.2f}" for _ in range(8))
    return f"ax,ay,az\n{rows}\n".encode()


def _run_agent(tmp_path: Path, heard: _Heard, results: str | None) -> None:
    """The agent of ``write_config`` (its ``models`` fixture) with MQTT, fed every file.

    ``mqtt.results`` set when ``results`` is given.
    """
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["mqtt"] = {  # its own client id: agents of other tests on the broker are "test-dev"
        "url": f"mqtt://127.0.0.1:{SHARED_PORT}",
        "topic_prefix": heard.prefix,
        "client_id": f"agent-{heard.prefix}",
    }
    if results is not None:
        doc["mqtt"]["results"] = results
    doc["output"] = {"jsonl": None}
    cfg_path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: bool(heard.on("status")), what="the agent online")
        for name, v in IMAGES.items():
            write_atomic(tmp_path / "in/cam" / name, jpeg(v))
        for name, level in CSVS.items():
            write_atomic(tmp_path / "in/vib" / name, _csv(level))
        wait_for(lambda: not any((tmp_path / "in/cam").iterdir()), what="cam files finished")
        wait_for(lambda: not any((tmp_path / "in/vib").iterdir()), what="vib files finished")
    finally:
        agent.stop()
    # a file is finished once the broker has its messages; the subscriber hears them after
    wait_for(lambda: _heard_every_item(heard, results), what="the subscriber heard every item")


def _heard_every_item(heard: _Heard, results: str | None) -> bool:
    """Window messages for every item of each source, and in item mode a result for each."""
    for source, names in (("cam", IMAGES), ("vib", CSVS)):
        if sum(w["items"] for w in heard.on(f"{source}/window")) < len(names):
            return False
        if results != "window" and len(heard.on(f"{source}/result")) < len(names):
            return False
    return True


def _items(results: list[dict[str, Any]]) -> list[str]:
    return sorted(r["item"] for r in results)


def test_window_mode_publishes_each_item_once_inside_its_window_and_no_result(
    tmp_path: Path, models: Path, heard: _Heard
) -> None:
    _run_agent(tmp_path, heard, "window")
    assert not [t for t, _ in heard.got if t.endswith("/result")]
    for source, names in (("cam", IMAGES), ("vib", CSVS)):
        windows = heard.on(f"{source}/window")
        embedded = [r for w in windows for r in w["results"]]
        assert _items(embedded) == sorted(names)  # every item exactly once
        assert len({r["id"] for r in embedded}) == len(names)
        assert all(w["items"] == len(w["results"]) and w["errors"] == 0 for w in windows)
        assert all(r["window_id"] == w["window_id"] for w in windows for r in w["results"])
        assert sorted(w["seq"] for w in windows) == list(range(1, len(windows) + 1))
    cam = heard.on("cam/window")
    labels = {r["item"]: r["label"] for w in cam for r in w["results"]}
    assert labels == {n: "dark" if v < 128 else "bright" for n, v in IMAGES.items()}
    vib = {r["item"]: r["anomaly"] for w in heard.on("vib/window") for r in w["results"]}
    assert vib == {"quiet.csv": False, "loud.csv": True}
    assert len(heard.on("vib/window")) == 2  # max_items 1: one window per file


def test_item_mode_is_the_default_and_unchanged(
    tmp_path: Path, models: Path, heard: _Heard
) -> None:
    _run_agent(tmp_path, heard, None)
    for source, names in (("cam", IMAGES), ("vib", CSVS)):
        results = heard.on(f"{source}/result")
        assert _items(results) == sorted(names)
        assert sorted(r["seq"] for r in results) == list(range(1, len(names) + 1))
        windows = heard.on(f"{source}/window")
        assert windows and all("results" not in w for w in windows)
        assert sum(w["items"] for w in windows) == len(names)
