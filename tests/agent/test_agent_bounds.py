"""The agent within bounds: decodes within ``limits``, reloads a hostile config quickly.

Real folder, real ONNX model, the JSON-lines output: a TIFF claiming 16000x16000 pixels
(named ``.jpg``) and a progressive JPEG over ``limits.max_jpeg_scans`` become ``DecodeError``
events and are quarantined, the good file beside them is scored; a SIGHUP reload of a YAML
billion laughs is refused at once and the agent goes on scoring.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from helpers import hostile_media as hm
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_config
from helpers.hostile_media import BILLION_LAUGHS
from helpers.paths import ROOT

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.decode import current_limits, set_limits


@pytest.fixture(autouse=True)
def _limits_put_back() -> Iterator[None]:
    before = current_limits()
    yield
    set_limits(before)


def test_headers_over_the_configured_limits_are_quarantined(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["limits"]["max_jpeg_scans"] = 5
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    img = np.full((64, 64, 3), 120, np.uint8)
    progressive = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    out = tmp_path / "out.jsonl"
    try:
        (cam / "bomb.jpg").write_bytes(hm.tiff_bomb())
        (cam / "scans.jpg").write_bytes(progressive)
        (cam / "good.jpg").write_bytes(jpeg(200))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) == 2, what="two error events")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="the good result")
    finally:
        agent.stop()
    lines = read_jsonl(out)
    errors = {e["item"]: e for e in of_kind(lines, "/error")}
    assert {e["error_type"] for e in errors.values()} == {"DecodeError"}
    assert "16000x16000 = 256000000 pixels" in errors["bomb.jpg"]["message"]
    assert "JPEG scan count is 10 scans, over the limit of 5" in errors["scans.jpg"]["message"]
    for e in errors.values():
        assert Path(e["quarantined_path"]).is_file()
    assert [r["item"] for r in of_kind(lines, "/result")] == ["good.jpg"]


def test_a_decode_past_its_cpu_deadline_is_quarantined_and_the_agent_goes_on(
    tmp_path: Path, models: Path
) -> None:
    """A decode within every header bound still costs tenths of a second: past the deadline.

    A 4000x3000 progressive JPEG; with a deadline below its cost, its decoder process is
    killed and the file quarantined, and the files after it are scored.
    """
    cfg_path = write_config(tmp_path, inflight="64MiB")
    doc = yaml.safe_load(cfg_path.read_text())
    doc["limits"].update(decode_deadline=0.02, isolate_decodes_over="256KiB")
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    rng = np.random.default_rng(5)
    noise = rng.integers(0, 256, (3000, 4000, 3), dtype=np.uint8)
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1, cv2.IMWRITE_JPEG_QUALITY, 95]
    slow = cv2.imencode(".jpg", noise, params)[1].tobytes()
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    out = tmp_path / "out.jsonl"
    try:
        (cam / "slow.jpg").write_bytes(slow)
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) == 1, what="the error event")
        (cam / "good.jpg").write_bytes(jpeg(200))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="the good result")
    finally:
        agent.stop()
    lines = read_jsonl(out)
    (error,) = of_kind(lines, "/error")
    assert error["item"] == "slow.jpg" and error["error_type"] == "DecodeError"
    assert "more than 0.02 s of CPU (limits.decode_deadline); abandoned" in error["message"]
    assert Path(error["quarantined_path"]).is_file()
    assert [r["item"] for r in of_kind(lines, "/result")] == ["good.jpg"]


def test_reload_of_a_billion_laughs_is_refused_at_once(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    out = tmp_path / "out.jsonl"
    try:
        cfg_path.write_bytes(BILLION_LAUGHS)
        t0 = time.monotonic()
        assert not agent.reload()  # what SIGHUP runs in the main loop
        assert time.monotonic() - t0 < 2.0
        (cam / "after.jpg").write_bytes(jpeg(100))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="a later result")
    finally:
        agent.stop()


def test_cli_sighup_with_a_billion_laughs_keeps_serving_and_sigterm_stops(
    tmp_path: Path, models: Path
) -> None:
    """The real signal path: ``cdml-edge run``, SIGHUP on a billion laughs, then SIGTERM."""
    cfg_path = write_config(tmp_path)
    out = tmp_path / "out.jsonl"
    log = tmp_path / "agent.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg_path)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
        )
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="the source folder")
        cfg_path.write_bytes(BILLION_LAUGHS)
        proc.send_signal(signal.SIGHUP)
        (cam / "a.jpg").write_bytes(jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="a result after HUP")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert "reload refused" in said and "aliases expand to more than 100000 nodes" in said


def test_a_decode_is_charged_to_the_in_flight_budget(tmp_path: Path, models: Path) -> None:
    """A 2000x2000 PNG of 20 KB holds 24 MB while it decodes: the budget sees it."""
    cfg_path = write_config(tmp_path)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    out = tmp_path / "out.jsonl"
    png = cv2.imencode(".png", np.zeros((2000, 2000, 3), np.uint8))[1].tobytes()
    assert len(png) < 100_000
    try:
        (cam / "big.png").write_bytes(png)
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="the result")
        assert agent.budget.peak >= 2000 * 2000 * 6  # beyond what 4 copies of 20 KB are
        wait_for(lambda: agent.budget.used == 0, what="every charge given back")
    finally:
        agent.stop()
