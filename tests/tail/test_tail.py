"""``cdml-edge tail``: a running agent followed through its ``output.jsonl`` and a real Mosquitto.

The agent has a real folder watch and real ONNX models. Also the file follower across
rotation, and the rich view.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.agent_runs import jpeg, wait_for, write_atomic
from helpers.models import brightness_classifier, level_anomaly
from helpers.mqtt_brokers import SHARED_PORT, port_open
from rich.console import Console

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.health import ActivityBoard
from cdml_edge.tail.console import render
from cdml_edge.tail.follow import follow_jsonl


def _csv(level: float) -> bytes:
    rows = np.full((8, 3), level)
    return ("ax,ay,az\n" + "\n".join(",".join(f"{v:.2f}" for v in r) for r in rows) + "\n").encode()


def _config(tmp_path: Path, broker: bool, results: str = "item") -> Path:
    brightness_classifier(tmp_path / "b.onnx")
    level_anomaly(tmp_path / "l.onnx", window=8)
    device = f"tail-{os.getpid()}-{time.monotonic_ns()}"
    url = f"mqtt://127.0.0.1:{SHARED_PORT}"
    mqtt = f"mqtt: {{url: '{url}', topic_prefix: tailtest, results: {results}}}\n"
    text = textwrap.dedent(f"""
        device: {{id: {device}}}
        sources:
          - {{name: cam, path: in/cam, modality: image, stable_seconds: 0.1,
              window: {{seconds: 50ms}}}}
          - {{name: vib, path: in/vib, modality: csv, stable_seconds: 0.1,
              window: {{seconds: 50ms}}}}
        models: {{image: {{path: b.onnx}}, csv: {{path: l.onnx}}}}
        health: {{interval: 0.3s, watchdog: false}}
    """) + (mqtt if broker else "output: {jsonl: out.jsonl}\n")
    (tmp_path / "in/cam").mkdir(parents=True)
    (tmp_path / "in/vib").mkdir(parents=True)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(text)
    return cfg


@pytest.mark.parametrize(
    ("via", "results"), [("file", "item"), ("broker", "item"), ("broker", "window")]
)
def test_tail_json_follows_a_running_agent(tmp_path: Path, via: str, results: str) -> None:
    """``results: window``: the items inside the window messages are shown as result messages."""
    if via == "broker" and not port_open(SHARED_PORT):
        pytest.fail("Mosquitto is not listening on 127.0.0.1:1883 (.ci/run starts it)")
    cfg_path = _config(tmp_path, broker=via == "broker", results=results)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    checkout = str(Path(__file__).resolve().parents[2])  # this checkout's cdml_edge
    tail = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg_path), "--json"]
        + ["--interval", "0.3", "--duration", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": checkout},
    )
    snaps: list[dict[str, Any]] = []
    reader = threading.Thread(
        target=lambda: snaps.extend(json.loads(line) for line in tail.stdout or []), daemon=True
    )
    reader.start()
    try:
        wait_for(
            lambda: bool(snaps) and snaps[-1]["health"] is not None,
            timeout=30,
            what="tail hearing the agent's health",
        )  # subscribed before files arrive
        for i, v in enumerate([20, 230, 40]):
            write_atomic(tmp_path / "in/cam" / f"p{i}.jpg", jpeg(v))
        write_atomic(tmp_path / "in/vib" / "quiet.csv", _csv(0.0))
        write_atomic(tmp_path / "in/vib" / "loud.csv", _csv(1.0))
        write_atomic(tmp_path / "in/cam" / "cut.jpg", jpeg(200)[:300])

        def seen() -> bool:
            last = snaps[-1] if snaps else {"sources": {}}
            s = last["sources"]
            return (
                s.get("cam", {}).get("items") == 3
                and s.get("vib", {}).get("items") == 2
                and s["cam"]["errors"] == 1
                and (last["health"] or {}).get("items") == 6
            )

        wait_for(seen, timeout=30, what="5 results, an error and health counting 6 items")
    finally:
        tail.terminate()
        tail.wait(timeout=10)
        agent.stop()
    last = snaps[-1]
    cam, vib = last["sources"]["cam"], last["sources"]["vib"]
    assert last["device"] == agent.cfg.device.id
    assert {r["item"]: r["label"] for r in cam["last"]} == {
        "p0.jpg": "dark",
        "p1.jpg": "bright",
        "p2.jpg": "dark",
    }
    assert vib["anomalies"] == 1 and cam["anomalies"] == 0
    assert [r["item"] for r in vib["last"] if r["anomaly"]] == ["loud.csv"]
    assert [e["item"] for e in last["errors"]] == ["cut.jpg"]
    assert cam["windows"] >= 1 and cam["rate_per_s"] > 0 and cam["latency_ms"] > 0
    assert last["health"]["items"] == 6 and last["health"]["dropped"] == 0


def test_the_file_follower_reads_appends_partial_lines_and_rotation(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"

    def line(item: str, topic: str = "cdml/d/cam/result") -> str:
        return json.dumps({"topic": topic, "payload": {"item": item, "score": 0.5}}) + "\n"

    out.write_text(line("a") + line("other", "cdml/e/cam/result") + "not json\n")
    board = ActivityBoard("d")
    stop = threading.Event()
    t = threading.Thread(target=follow_jsonl, args=(out, "cdml/d/", board.observe, stop))
    t.start()
    try:
        wait_for(lambda: board.snapshot()["messages"] == 1, what="the first line")
        half = line("b")
        with open(out, "a") as fh:
            fh.write(half[:10])
            fh.flush()
            time.sleep(0.5)
            assert board.snapshot()["messages"] == 1  # half a line is not a message
            fh.write(half[10:])
        wait_for(lambda: board.snapshot()["messages"] == 2, what="the completed line")
        os.replace(out, tmp_path / "out.jsonl.1")  # what JsonlOutput does past max_bytes
        out.write_text(line("c"))
        wait_for(lambda: board.snapshot()["messages"] == 3, what="the line after rotation")
    finally:
        stop.set()
        t.join(5)
    assert [r["item"] for r in board.snapshot()["sources"]["cam"]["last"]] == ["a", "b", "c"]


def _board() -> ActivityBoard:
    board = ActivityBoard("line-3")
    now = time.time()
    board.observe("status", None, {"state": "online"})
    board.observe(
        "health",
        None,
        {
            "uptime_s": 3600,
            "broker_connected": True,
            "outbox_depth": 0,
            "spool_bytes": 0,
            "spool_records": 0,
            "dropped": 0,
        },
    )
    for i in range(6):
        board.observe(
            "result",
            "cam",
            {
                "item": f"part-{i:03d}.jpg",
                "label": "ok",
                "score": 0.97,
                "latency_ms": 41.0 + i,
                "ts": now + i,
            },
        )
    board.observe(
        "result",
        "vib",
        {
            "item": "axis-007.csv",
            "label": "anomaly",
            "score": 3.1,
            "anomaly": True,
            "anomaly_score": 3.1,
            "latency_ms": 55.0,
            "ts": now + 10,
        },
    )
    board.observe("window", "cam", {"timings": {"total_ms": 12.5}})
    board.observe(
        "error",
        "cam",
        {
            "source": "cam",
            "item": "part-bad.jpg",
            "error_type": "DecodeError",
            "message": "truncated JPEG",
            "ts": now,
        },
    )
    return board


def test_a_window_message_with_results_shows_as_its_result_messages() -> None:
    """``mqtt.results: window``: the board (tail, status page) reads the embedded items."""
    results = [
        {"item": "a.jpg", "label": "ok", "score": 0.9, "latency_ms": 4.0, "ts": 100.0},
        {"item": "b.jpg", "label": "bad", "score": 0.8, "anomaly": True, "ts": 100.5},
    ]
    window = {"window_id": "w1", "timings": {"total_ms": 3.5}}
    one, each = ActivityBoard("d", clock=lambda: 200.0), ActivityBoard("d", clock=lambda: 200.0)
    one.observe("window", "cam", {**window, "results": results})
    for r in results:
        each.observe("result", "cam", r)
    each.observe("window", "cam", window)
    assert one.snapshot()["sources"] == each.snapshot()["sources"]
    cam = one.snapshot()["sources"]["cam"]
    assert cam["items"] == 2 and cam["windows"] == 1 and cam["anomalies"] == 1
    assert [r["item"] for r in cam["last"]] == ["a.jpg", "b.jpg"]
    one.observe("window", "cam", {**window, "results": [None, "x"]})  # not results: skipped
    assert one.snapshot()["sources"]["cam"]["items"] == 2


def test_the_terminal_view_shows_sources_results_anomalies_errors_and_health() -> None:
    console = Console(record=True, width=120, force_terminal=True, color_system="truecolor")
    console.print(render(_board().snapshot(), "mqtt://127.0.0.1:1883"))
    text = console.export_text(styles=False, clear=False)
    assert "line-3" in text and "online" in text and "broker connected" in text
    assert "part-005.jpg" in text and "axis-007.csv" in text and "DecodeError" in text
    styled = console.export_text(styles=True, clear=False)
    assert "\x1b[1;31m" in styled  # the anomaly row and the error count in bold red
    if os.environ.get("CDML_TAIL_SCREENSHOT"):  # refresh docs/img/tail.svg
        console.save_svg(os.environ["CDML_TAIL_SCREENSHOT"], title="cdml-edge tail")


def test_tail_into_a_pipe_prints_plain_lines(tmp_path: Path) -> None:
    """It drew one frame with cut headers and no final newline into a pipe."""
    out = tmp_path / "out.jsonl"
    out.write_text(
        json.dumps(
            {
                "topic": "cdml/edge-1/cam/result",
                "payload": {"item": "x.jpg", "label": "ok", "score": 0.9},
            }
        )
        + "\n"
    )
    (tmp_path / "a.yaml").write_text("output: {jsonl: out.jsonl}\n")
    checkout = str(Path(__file__).resolve().parents[2])  # this checkout's cdml_edge
    res = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(tmp_path / "a.yaml")]
        + ["--duration", "1", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": checkout},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.endswith("\n") and "\x1b[" not in res.stdout and "━" not in res.stdout
    lines = res.stdout.splitlines()
    assert len(lines) >= 6  # a few intervals, three lines each
    assert any(f"edge-1 ({out}): 1 message, last " in ln for ln in lines), lines
    cam = r"^\d\d:\d\d:\d\d cam: [0-9.]+/s, latency – ms, 1 item, 0 windows, 0 anomalies, "
    assert any(re.match(cam + "0 errors, last x.jpg ok$", ln) for ln in lines), lines
