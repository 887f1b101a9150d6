"""``cdml-edge tail`` fed what no appliance sends: garbage, huge payloads, hostile names.

Anyone who may publish on the broker can put anything under ``{prefix}/{device}/#``; a file
name can hold ``[/]``, a line break or a terminal escape. The real ``tail`` process follows the
shared Mosquitto (or a real ``output.jsonl``); messages are published by a real client. It
must go on showing what the appliance publishes, exit as it would without the garbage, and
never let a name draw on the operator's terminal or forge a line of its output.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from helpers.agent_runs import wait_for
from helpers.mqtt_brokers import SHARED_PORT, port_open

CHECKOUT = str(Path(__file__).resolve().parents[2])  # this checkout's cdml_edge
ENV = {**os.environ, "PYTHONPATH": CHECKOUT, "COLUMNS": "220"}


def _device() -> str:
    return f"tailbad-{os.getpid()}-{time.monotonic_ns()}"


def _config(tmp_path: Path, device: str) -> Path:
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"device: {{id: {device}}}\nmqtt: {{url: 'mqtt://127.0.0.1:{SHARED_PORT}'}}\n")
    return cfg


def _need_broker() -> None:
    if not port_open(SHARED_PORT):
        pytest.fail("Mosquitto is not listening on 127.0.0.1:1883 (.ci/run starts it)")


def _publish(device: str, messages: list[tuple[str, bytes]]) -> None:
    """Each ``(topic under cdml/<device>/, payload)`` at QoS 1, in order, from a real client."""
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"{device}-pub")
    client.connect("127.0.0.1", SHARED_PORT)
    client.loop_start()
    try:
        for topic, payload in messages:
            client.publish(f"cdml/{device}/{topic}", payload, qos=1).wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()


class JsonTail:
    """``cdml-edge tail --json`` as a process; its snapshots as they come."""

    def __init__(self, cfg: Path, *args: str, duration: float = 30) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg), "--json"]
            + ["--interval", "0.2", "--duration", str(duration), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        self.snaps: list[dict[str, Any]] = []
        self.longest = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout or []:
            self.longest = max(self.longest, len(line))
            self.snaps.append(json.loads(line))

    def last(self) -> dict[str, Any]:
        return self.snaps[-1] if self.snaps else {"sources": {}, "link": None}

    def connected(self) -> bool:
        return bool((self.last()["link"] or {}).get("connected"))

    def stop(self) -> tuple[int, str]:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, err


GARBAGE: list[tuple[str, bytes]] = [
    ("cam/window", b'{"timings": [1, 2]}'),  # a list where an object goes
    ("cam/result", b'{"item": 5, "score": "x", "latency_ms": "y", "ts": "z"}'),
    ("cam/result", b'{"item": "a.jpg", "latency_ms": 1.5}'),
    ("cam/result", b'{"item": "b.jpg", "latency_ms": "2"}'),  # numbers and strings mixed
    ("cam/error", b'{"ts": 1e300, "message": {"a": 1}, "item": ["x"]}'),
    ("cam/camera", b'{"state": {"nested": true}}'),
    ("health", b'{"uptime_s": "long", "spool_bytes": "many", "degraded": [1]}'),
    ("status", b'{"state": {"x": 1}}'),
    ("cam/result", b"\xff\xfe not JSON, not UTF-8"),
    ("cam/result", b"[1, 2, 3]"),
    ("cam/result", json.dumps({"item": "L" * 300_000, "score": 0.5}).encode()),
    ("cam/result", json.dumps({"item": "H" * (6 << 20)}).encode()),  # over the bound
]


def test_garbage_from_the_broker_does_not_stop_tail(tmp_path: Path) -> None:
    """Each message of the wrong shape is skipped or shown as missing; what follows is shown."""
    _need_broker()
    device = _device()
    tail = JsonTail(_config(tmp_path, device))
    try:
        wait_for(tail.connected, timeout=20, what="tail connected")
        time.sleep(0.3)  # subscribed
        _publish(device, GARBAGE)
        _publish(device, [("cam/result", b'{"item": "good.jpg", "label": "ok", "score": 0.9}')])
        wait_for(
            lambda: any(
                r["item"] == "good.jpg"
                for r in tail.last()["sources"].get("cam", {}).get("last", [])
            ),
            timeout=20,
            what="the good result after the garbage",
        )
        _publish(device, [("health", b'{"uptime_s": 12.5, "spool_bytes": 10, "degraded": {}}')])
        wait_for(
            lambda: (tail.last()["health"] or {}).get("uptime_s") == 12.5,
            timeout=20,
            what="a good health message after the garbage",
        )
    finally:
        code, err = tail.stop()
    last = tail.last()
    assert "Traceback" not in err, err
    assert code in (0, -15), err
    assert last["link"]["connected"], last["link"]
    cam = last["sources"]["cam"]
    assert cam["items"] == 5  # the result messages that are JSON objects (not the huge one)
    assert last["ignored"] == 3  # not JSON, not an object, and over the bound
    assert all(len(r["item"] or "") <= 512 for r in cam["last"])  # long names cut
    assert tail.longest < 64 * 1024  # what the board holds stays small


def test_a_garbage_line_in_output_jsonl_does_not_stop_tail(tmp_path: Path) -> None:
    """Following a file: a line of the wrong shape is skipped, the lines after it are shown."""
    device = _device()
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"device: {{id: {device}}}\noutput: {{jsonl: out.jsonl}}\n")
    base = f"cdml/{device}/"
    lines = [
        {"topic": base + "cam/window", "payload": {"timings": [1]}},
        {"topic": 5, "payload": {}},
        {"topic": base + "cam/error", "payload": {"ts": "now"}},
        {"topic": base + "cam/result", "payload": {"item": "good.jpg", "score": 0.5}},
    ]
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    tail = JsonTail(cfg, duration=4)
    code = tail.proc.wait(timeout=30)
    err = tail.proc.stderr.read() if tail.proc.stderr else ""
    assert code == 0 and "Traceback" not in err, err
    cam = tail.last()["sources"]["cam"]
    assert [r["item"] for r in cam["last"]] == ["good.jpg"] and cam["errors"] == 1


def _terminal_tail(cfg: Path, duration: float) -> tuple[subprocess.Popen[bytes], int]:
    """``tail`` with its stdout on a pseudo-terminal (the redrawn rich view); the master fd."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg)]
        + ["--interval", "0.2", "--duration", str(duration)],
        stdout=slave,
        stderr=slave,
        env={**ENV, "TERM": "xterm-256color"},
    )
    os.close(slave)
    return proc, master


def _drain(master: int, proc: subprocess.Popen[bytes]) -> bytes:
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end closed
                return out
            if not chunk:
                return out
            out += chunk
        elif proc.poll() is not None:
            return out


def test_terminal_view_shows_names_with_brackets(tmp_path: Path) -> None:
    """``[/]`` in a file name is text, not rich markup (it used to end tail with a traceback)."""
    _need_broker()
    device = _device()
    proc, master = _terminal_tail(_config(tmp_path, device), duration=6)
    out = b""
    try:
        time.sleep(3)  # connected and subscribed (the rich view has no link state to read)
        result = {"item": "part[/]7.jpg", "label": "[bold]ok", "score": 0.9, "ts": time.time()}
        _publish(device, [("cam/result", json.dumps(result).encode())])
        out = _drain(master, proc)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = out.decode(errors="replace")
    assert "Traceback" not in text and "MarkupError" not in text, text[-2000:]
    assert proc.returncode == 0, text[-2000:]
    assert "part[/]7.jpg" in text and "[bold]ok" in text


def test_plain_lines_escape_control_characters_in_names(tmp_path: Path) -> None:
    """A line break or an escape sequence in a name cannot forge a line or clear a screen."""
    _need_broker()
    device = _device()
    cfg = _config(tmp_path, device)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "tail", "--config", str(cfg)]
        + ["--interval", "0.2", "--duration", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        time.sleep(2.5)
        name = "a\n12:00:00 forged: all good\x1b[2J.jpg"
        event = {"item": name, "error_type": "Bad\x1b]0;title\x07", "message": "x\ny"}
        _publish(device, [("cam/result", json.dumps({"item": name, "score": 0.5}).encode())])
        _publish(device, [("cam/error", json.dumps(event).encode())])
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert b"\x1b" not in out and b"\x07" not in out
    assert not any(line.startswith(b"12:00:00 forged") for line in out.splitlines())
    assert b"a\\n12:00:00 forged: all good\\x1b[2J.jpg" in out
