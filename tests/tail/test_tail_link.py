"""``cdml-edge tail`` and its broker: not connected, the protocol spoken, a closed stdout.

It says when it is not connected and why (exit 1 if it never connected), speaks the protocol
the agent's config implies, and a closed stdout ends it quietly.

Real brokers: nothing listening (a free port), Mosquitto refusing anonymous clients, the
embedded amqtt broker (MQTT 3.1.1 only).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from helpers.mqtt_brokers import BrokerProcess, mosquitto_binary, port_open, wait_until
from helpers.ports import free_port
from rich.console import Console

from cdml_edge.config import load_config
from cdml_edge.tail.console import render
from cdml_edge.tail.follower import Followed, run_tail

CHECKOUT = str(Path(__file__).resolve().parents[2])  # this checkout's cdml_edge


def _tail(cfg: Path, *args: str, duration: float = 2.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg), *args]
        + ["--duration", str(duration), "--interval", "0.3"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": CHECKOUT},
    )


def _config(tmp_path: Path, mqtt: str) -> Path:
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"device: {{id: line3-cam}}\nmqtt: {mqtt}\n")
    return cfg


def _snaps(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.fixture
def embedded_broker(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The agent's embedded broker on a free port; yields the port and its log."""
    port, log = free_port(), tmp_path / "embedded.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.outputs.mqtt.embedded_broker", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": CHECKOUT},
        )
    try:
        assert wait_until(lambda: port_open(port), 20), log.read_text()
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)


def test_plain_view_says_it_cannot_reach_the_broker_and_exits_1(tmp_path: Path) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    res = _tail(_config(tmp_path, f"{{url: '{url}'}}"))
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = res.stdout.splitlines()
    assert any(
        re.match(rf"^\d\d:\d\d:\d\d not connected: cannot reach {url}: connection refused", ln)
        for ln in lines
    ), lines
    assert res.stderr == f"cdml-edge tail: never connected to {url}: connection refused\n"


def test_json_view_carries_the_link_and_exits_1(tmp_path: Path) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    res = _tail(_config(tmp_path, f"{{url: '{url}'}}"), "--json")
    assert res.returncode == 1, res.stderr
    link = _snaps(res.stdout)[-1]["link"]
    assert link["url"] == url and link["connected"] is False
    assert link["state"] == "unreachable" and link["reason"] == "connection refused"


def test_terminal_view_says_it_cannot_reach_the_broker(tmp_path: Path) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    cfg = load_config(_config(tmp_path, f"{{url: '{url}'}}"))
    snaps: list[dict[str, Any]] = []
    run_tail(cfg, Followed(), snaps.append, interval=0.3, duration=1.0)
    console = Console(record=True, width=160, force_terminal=True)
    console.print(render(snaps[-1], url))
    text = console.export_text(styles=False)
    assert f"not connected: cannot reach {url}: connection refused" in text, text


def test_a_broker_that_refuses_the_client_is_named(tmp_path: Path) -> None:
    if mosquitto_binary() is None:
        pytest.fail("Mosquitto is not installed (.ci/run installs it)")
    (tmp_path / "passwd").write_text("")  # no user may connect
    broker = BrokerProcess(tmp_path / "broker", password_file=tmp_path / "passwd").start()
    try:
        res = _tail(_config(tmp_path, f"{{url: '{broker.url}'}}"))
    finally:
        broker.stop()
    assert res.returncode == 1, res.stderr
    assert f"not connected: {broker.url} refused the connection: Not authorized" in res.stdout
    assert res.stderr == (
        f"cdml-edge tail: never connected to {broker.url}: "
        "the broker refused the connection: Not authorized\n"
    )


def _publish_health(port: int) -> None:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.publish("cdml/line3-cam/health", json.dumps({"uptime_s": 5}), qos=1).wait_for_publish(5)
    client.loop_stop()
    client.disconnect()


def test_an_embedded_broker_config_is_followed_with_mqtt_311(
    tmp_path: Path, embedded_broker: tuple[int, Path]
) -> None:
    """``mqtt.url: embedded`` with ``--broker``: 3.1.1 from the start, no refused MQTT 5."""
    port, log = embedded_broker
    cfg = _config(tmp_path, "{url: embedded}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg), "--json"]
        + ["--broker", f"mqtt://127.0.0.1:{port}", "--interval", "0.2", "--duration", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": CHECKOUT},
    )
    time.sleep(2)  # subscribed by then
    _publish_health(port)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    last = _snaps(out)[-1]
    assert last["link"]["connected"] is True and last["link"]["protocol"] == "3.1.1"
    assert last["health"] == {"uptime_s": 5}
    assert "Invalid protocol" not in log.read_text()


def test_a_broker_refusing_mqtt_5_is_followed_with_311(
    tmp_path: Path, embedded_broker: tuple[int, Path]
) -> None:
    """A 3.1.1-only broker named as an external one (protocol 5 by default): it falls back."""
    port, _ = embedded_broker
    res = _tail(_config(tmp_path, f"{{url: 'mqtt://127.0.0.1:{port}'}}"), "--json")
    assert res.returncode == 0, res.stderr
    link = _snaps(res.stdout)[-1]["link"]
    assert link["connected"] is True and link["protocol"] == "3.1.1"


def test_a_closed_stdout_ends_tail_quietly(tmp_path: Path) -> None:
    """``tail --json | head -1``: no "Broken pipe" message, exit 0."""
    (tmp_path / "out.jsonl").write_text("")
    (tmp_path / "a.yaml").write_text("output: {jsonl: out.jsonl}\n")
    read_fd, write_fd = os.pipe()  # a pipe that head closes after one line
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(tmp_path / "a.yaml")]
        + ["--json", "--interval", "0.1", "--duration", "20"],
        stdout=write_fd,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": CHECKOUT},
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        assert reader.readline()  # one view, then the reader goes away
    _, err = proc.communicate(timeout=30)
    assert err == "" and proc.returncode == 0, (proc.returncode, err)
