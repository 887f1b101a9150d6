"""``health.watchdog`` in the config: the agent's sd_notify traffic on a real AF_UNIX socket."""

from __future__ import annotations

import json
import socket
import textwrap
import time
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for
from helpers.models import brightness_classifier
from helpers.notify_socket import Collector

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _config(tmp_path: Path, watchdog: bool) -> Path:
    brightness_classifier(tmp_path / "brightness.onnx")
    text = f"""
    device: {{id: wd-test}}
    sources:
      - name: cam
        path: in/cam
        modality: image
        window: {{seconds: 50ms, max_items: 1}}
        stable_seconds: 0.05
    models:
      image: {{path: brightness.onnx}}
    quarantine: {{dir: quarantine}}
    health: {{interval: 1s, watchdog: {str(watchdog).lower()}}}
    output: {{jsonl: out.jsonl}}
    """
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(textwrap.dedent(text))
    return cfg


def _run_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog: bool) -> list[str]:
    cfg = _config(tmp_path, watchdog)
    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    monkeypatch.setenv("WATCHDOG_USEC", "100000")  # systemd would want a ping every 50 ms
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.chdir(tmp_path)
    collector = Collector(srv)
    agent = Agent(load_config(cfg), cfg)
    try:
        agent.start()
        (tmp_path / "in/cam/a.jpg").write_bytes(jpeg(200))
        out = tmp_path / "out.jsonl"
        wait_for(
            lambda: (
                out.exists()
                and any(
                    json.loads(ln)["topic"].endswith("/result")
                    for ln in out.read_text().splitlines()
                )
            ),
            what="a result",
        )
        time.sleep(0.5)  # ten watchdog intervals: pings would be there by now
    finally:
        agent.stop()
        fields = collector.close()
    return fields


def test_watchdog_false_in_an_armed_unit_pings_while_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off, progress is not judged; an armed ``WatchdogSec=`` still hears the process live."""
    fields = _run_agent(tmp_path, monkeypatch, watchdog=False)
    assert "READY=1" in fields and "STOPPING=1" in fields, fields
    assert "WATCHDOG=1" in fields, fields


def test_watchdog_true_pings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fields = _run_agent(tmp_path, monkeypatch, watchdog=True)
    assert "READY=1" in fields and "STOPPING=1" in fields, fields
    assert "WATCHDOG=1" in fields, fields
