"""The real agent with supervised threads: a death is restarted, counted, published.

Health (``/healthz``, the systemd watchdog, the health payload) tells the truth meanwhile.
"""

from __future__ import annotations

import errno
import json
import shutil
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import (
    FailingSession,
    jpeg,
    of_kind,
    read_jsonl,
    wait_for,
    write_atomic,
    write_config,
)
from helpers.mqtt_brokers import Subscriber
from helpers.notify_socket import Collector

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_source_whose_folder_is_gone_is_dead_until_it_is_back(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"].update(metrics_port=port, metrics_host="127.0.0.1")
    cfg_path.write_text(yaml.safe_dump(doc))
    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    monkeypatch.setenv("WATCHDOG_USEC", "100000")  # a ping every 50 ms while healthy
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    collector = Collector(srv)
    out = tmp_path / "out.jsonl"
    cam = tmp_path / "in/cam"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.supervisor.backoff_max = 0.5
    agent.start()
    try:
        write_atomic(cam / "a.jpg", jpeg(240))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="first result")
        wait_for(lambda: not (cam / "a.jpg").exists(), what="a.jpg deleted")
        assert _healthz(port)[0] == 200
        shutil.rmtree(cam)
        cam.write_bytes(b"a file where the folder was")  # the watch cannot be armed again
        wait_for(lambda: _healthz(port)[0] == 503, what="/healthz unhealthy")
        code, body = _healthz(port)
        assert body["status"] == "dead_threads" and body["dead_threads"] == ["src-cam"]
        pings = collector.fields.count("WATCHDOG=1")
        time.sleep(0.6)  # a dozen watchdog intervals: no ping while the source is dead
        assert collector.fields.count("WATCHDOG=1") == pings
        assert "STATUS=dead: src-cam" in collector.fields
        wait_for(
            lambda: any(
                h["dead_threads"] == ["src-cam"] and h["thread_deaths"] >= 1
                for h in of_kind(read_jsonl(out), "/health")
            ),
            what="the health payload naming the dead thread",
        )
        cam.unlink()  # the folder may come back
        wait_for(lambda: _healthz(port)[0] == 200, what="/healthz healthy again")
        write_atomic(cam / "b.jpg", jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 2, what="second result")
        wait_for(lambda: collector.fields.count("WATCHDOG=1") > pings, what="pings again")
    finally:
        agent.stop()
        collector.close()
    lines = read_jsonl(out)
    events = [e for e in of_kind(lines, "/error") if e["error_type"] == "ThreadDied"]
    assert events and all(e["source"] == "cam" and "src-cam died" in e["message"] for e in events)
    exposition = agent.metrics.exposition().decode()
    deaths = [
        ln
        for ln in exposition.splitlines()
        if ln.startswith('cdml_edge_thread_deaths_total{thread="src-cam"}')
    ]
    assert deaths and float(deaths[0].split()[-1]) == len(events)
    assert "cdml_edge_threads_dead 0.0" in exposition
    assert sorted(r["item"] for r in of_kind(lines, "/result")) == ["a.jpg", "b.jpg"]


def test_a_worker_that_dies_on_a_window_gives_its_files_back(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg_path = write_config(tmp_path)
    out = tmp_path / "out.jsonl"
    cam = tmp_path / "in/cam"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    runner = agent.runners["image"]
    runner.session = FailingSession(runner.session, 1)  # the first window fails ...
    failed = []

    def broken_policy(window: Any, exc: Exception) -> None:  # ... and so does its handling
        failed.append(window.window_id)
        raise RuntimeError("the retry policy itself failed")

    monkeypatch.setattr(agent.retry, "window_failed", broken_policy)
    try:
        write_atomic(cam / "a.jpg", jpeg(240))
        wait_for(
            lambda: len(of_kind(read_jsonl(out), "/result")) == 1,
            timeout=30,
            what="a.jpg scored after the worker died",
        )
        wait_for(lambda: not (cam / "a.jpg").exists(), what="a.jpg deleted")
        wait_for(  # its restart comes 0.5 s after its death: the file may be done sooner
            lambda: sum(agent.supervisor.restarts.values()) == 1, what="the worker restarted"
        )
    finally:
        drained = agent.stop()
    assert drained and len(failed) == 1
    assert sum(agent.supervisor.restarts.values()) == 1
    assert agent.budget.used == 0
    lines = read_jsonl(out)
    assert [r["item"] for r in of_kind(lines, "/result")] == ["a.jpg"]
    died = [e for e in of_kind(lines, "/error") if e["error_type"] == "ThreadDied"]
    assert len(died) == 1 and died[0]["source"] == "agent"
    assert "pipeline-" in died[0]["message"]


@pytest.mark.broker
@pytest.mark.slow  # the whole agent through a full disk, a dead I/O thread and its restart
def test_the_mqtt_io_thread_is_restarted_after_a_full_disk_killed_it(
    tmp_path: Path, models: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc.update(
        mqtt={"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix},
        spool={"dir": "spool"},
        output={"jsonl": None},
    )
    cfg_path.write_text(yaml.safe_dump(doc))
    sub = Subscriber(1883, f"{prefix}/#")
    cam = tmp_path / "in/cam"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    pub: Any = agent.output
    real_commit = pub.spool.commit
    calls = {"n": 0}

    def full_disk_once() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_commit()

    def results() -> list[str]:
        return [p["item"] for p in sub.on("/cam/result")]

    try:
        (cam / "a.jpg").write_bytes(jpeg(250))
        wait_for(lambda: results() == ["a.jpg"], what="a result before the fault")
        pub.spool.commit = full_disk_once  # the I/O thread's next cursor commit fails
        wait_for(lambda: calls["n"] >= 2, what="the I/O loop running again")
        (cam / "b.jpg").write_bytes(jpeg(5))
        wait_for(lambda: "b.jpg" in results(), what="a result after the restart")
        wait_for(lambda: sub.on("/agent/error") != [], what="the event")
    finally:
        agent.stop()
        sub.close()
    (event,) = sub.on(f"{prefix}/test-dev/agent/error")
    assert event["error_type"] == "ThreadDied" and "mqtt-io died: OSError" in event["message"]
    assert agent.supervisor.restarts == {"mqtt-io": 1}
    assert sorted(set(results())) == ["a.jpg", "b.jpg"]


def test_watchdog_off_in_an_armed_unit_still_pings_while_alive(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``health.watchdog: false`` sent nothing, and the unit's ``WatchdogSec=`` killed it.

    Off means progress is not judged; the process still says it is alive.
    """
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"]["watchdog"] = False
    cfg_path.write_text(yaml.safe_dump(doc))
    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    collector = Collector(srv)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: collector.fields.count("WATCHDOG=1") >= 3, what="liveness pings")
    finally:
        agent.stop()
        collector.close()
