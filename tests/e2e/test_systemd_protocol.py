"""The agent speaks the systemd protocol the unit relies on.

A real `cdml-edge run` process with NOTIFY_SOCKET and WATCHDOG_USEC set, as systemd would start
it (Type=notify, WatchdogSec=).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import yaml
from helpers.models import image_classifier


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _next(srv: socket.socket, want: str, deadline_s: float = 60.0) -> list[str]:
    """Datagrams until one contains the field ``want``; returns that one's fields."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        srv.settimeout(max(0.1, end - time.monotonic()))
        try:
            fields = srv.recv(4096).decode().split("\n")
        except TimeoutError:
            break
        if any(f == want or f.startswith(want) for f in fields):
            return fields
    raise AssertionError(f"no {want!r} from the agent within {deadline_s} s")


def _has_result(obj: object, item: str) -> bool:
    """Somewhere in a JSON line: an object with ``"item": item`` (a result payload)."""
    if isinstance(obj, dict):
        return obj.get("item") == item or any(_has_result(v, item) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_result(v, item) for v in obj)
    if isinstance(obj, str) and obj.startswith("{"):
        try:
            return _has_result(json.loads(obj), item)
        except ValueError:
            return False
    return False


def _jsonl(path: Path) -> list[object]:
    """The complete lines of a JSON-lines file being written.

    A last partial line is not one yet.
    """
    text = path.read_text() if path.exists() else ""
    out = []
    for ln in text.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:
            continue
    return out


def _until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return bytes(resp.read())


def test_ready_watchdog_reload_stop(tmp_path: Path) -> None:
    (tmp_path / "cam").mkdir()
    image_classifier(tmp_path / "tiny.onnx")
    port = _free_port()
    cfg = {
        "device": {"id": "proto-test"},
        "sources": [
            {
                "name": "cam",
                "path": "cam",
                "modality": "image",
                "window": {"seconds": 0.05, "max_items": 1},
                "stable_seconds": 0.05,
            }
        ],
        "models": {"image": {"path": "tiny.onnx"}},
        "output": {"jsonl": "out.jsonl"},
        "spool": {"dir": "spool"},
        "quarantine": {"dir": "quarantine"},
        "health": {"metrics_port": port, "metrics_host": "127.0.0.1", "stall_after": 30},
    }
    config = tmp_path / "factory.yaml"
    config.write_text(yaml.safe_dump(cfg))

    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="1000000")
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(config)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        ready = _next(srv, "READY=1")
        assert any(f.startswith("STATUS=") and "1 model" in f for f in ready), ready
        # READY came after the model was loaded and warmed up: it is already scored work.
        _next(srv, "WATCHDOG=1", 10)
        ok, img = cv2.imencode(".png", np.full((8, 8), 128, np.uint8))
        assert ok
        (tmp_path / "cam" / "part-1.png").write_bytes(img.tobytes())
        out = tmp_path / "out.jsonl"
        _until(lambda: any(_has_result(d, "part-1.png") for d in _jsonl(out)), "a result")
        # The result line is written before the window counts as done (its on_durable runs
        # once the output took the batch): wait for the counters, do not race them.
        _until(
            lambda: json.loads(_get(f"http://127.0.0.1:{port}/healthz"))["progress_count"] >= 1,
            "progress on /healthz",
        )
        health = json.loads(_get(f"http://127.0.0.1:{port}/healthz"))
        assert health["status"] == "ok" and health["progress_count"] >= 1
        metrics = _get(f"http://127.0.0.1:{port}/metrics").decode()
        assert 'cdml_edge_items_total{modality="image",source="cam"} 1.0' in metrics
        assert 'cdml_edge_windows_total{source="cam"} 1.0' in metrics
        _next(srv, "WATCHDOG=1", 10)  # pings keep coming while healthy

        proc.send_signal(signal.SIGHUP)  # ExecReload=/bin/kill -HUP $MAINPID
        reloading = _next(srv, "RELOADING=1", 30)
        assert any(f.startswith("MONOTONIC_USEC=") for f in reloading), reloading
        _next(srv, "READY=1", 60)

        proc.send_signal(signal.SIGTERM)  # systemctl stop
        _next(srv, "STOPPING=1", 30)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.close()
        log = proc.stdout.read().decode() if proc.stdout else ""
        print(log[-4000:])
