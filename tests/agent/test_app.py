"""The whole agent: real folders, real watchdog events, real ONNX models, JSON-lines output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
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

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.decode.image import decode_cost
from cdml_edge.decode.image_header import read_header


def _csv(rows: np.ndarray) -> bytes:
    return ("ax,ay,az\n" + "\n".join(",".join(f"{v:.2f}" for v in r) for r in rows) + "\n").encode()


def test_agent_scores_files_applies_on_done_and_quarantines(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path, retention=True)
    cam, vib = tmp_path / "in/cam", tmp_path / "in/vib"
    cam.mkdir(parents=True)
    (cam / "early.jpg").write_bytes(jpeg(240))  # present before start
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        assert set(agent.runners) == {"image", "csv"}
        assert all(r.warmup_ms is not None for r in agent.runners.values())
        write_atomic(cam / "dark.jpg", jpeg(10))
        (cam / "bright.jpg").write_bytes(jpeg(230))
        good = jpeg(200)
        (cam / "cut.jpg").write_bytes(good[: len(good) // 2])  # truncated JPEG
        (cam / "notes.txt").write_bytes(b"not an image pattern")  # not taken
        vib.mkdir(parents=True, exist_ok=True)
        write_atomic(vib / "quiet.csv", _csv(np.zeros((8, 3))))
        write_atomic(vib / "loud.csv", _csv(np.ones((8, 3))))
        write_atomic(vib / "broken.csv", b"ax,ay,az\n1,2\n")
        out = tmp_path / "out.jsonl"
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) >= 5, what="5 results")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) >= 2, what="2 error events")
        wait_for(lambda: not (cam / "bright.jpg").exists(), what="on_done delete")
    finally:
        agent.stop()
    lines = read_jsonl(tmp_path / "out.jsonl")
    results = {r["item"]: r for r in of_kind(lines, "/result")}
    assert {k: results[k]["label"] for k in ("early.jpg", "dark.jpg", "bright.jpg")} == {
        "early.jpg": "bright",
        "dark.jpg": "dark",
        "bright.jpg": "bright",
    }
    assert results["quiet.csv"]["anomaly"] is False and results["loud.csv"]["anomaly"] is True
    assert set(results) == {"early.jpg", "dark.jpg", "bright.jpg", "quiet.csv", "loud.csv"}
    assert all(r["device"] == "test-dev" and r["latency_ms"] >= 0 for r in results.values())
    topics = {m["topic"] for m in lines}
    assert {
        "cdml/test-dev/cam/result",
        "cdml/test-dev/vib/window",
        "cdml/test-dev/status",
        "cdml/test-dev/health",
    } <= topics
    errors = {e["item"]: e for e in of_kind(lines, "/error")}
    assert set(errors) == {"cut.jpg", "broken.csv"}
    q = Path(errors["cut.jpg"]["quarantined_path"])
    assert q.is_file() and q.parent == tmp_path / "quarantine" / "cam"
    assert (tmp_path / "quarantine/vib/broken.csv").is_file()
    # on_done: cam files deleted, vib files moved, the non-matching file untouched
    assert sorted(p.name for p in cam.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in (tmp_path / "done/vib").iterdir()) == ["loud.csv", "quiet.csv"]
    assert list(vib.iterdir()) == []
    # every window was retained before its files were finished
    windows = of_kind(lines, "/window")
    assert len(list((tmp_path / "ret").glob("*.window.json"))) == len(windows)
    status = of_kind(lines, "/status")
    assert status[0]["state"] == "online" and status[-1]["state"] == "offline"
    health = of_kind(lines, "/health")[-1]
    assert health["items"] == 7 and health["errors"] >= 2 and health["windows"] == len(windows)


def test_results_have_stable_ids_across_runs(tmp_path: Path, models: Path) -> None:
    """Same files, same ids; a restart does not score kept files again (the kept-file record)."""
    cfg_path = write_config(tmp_path)
    text = cfg_path.read_text().replace("on_done: delete", "on_done: keep")
    cfg_path.write_text(text)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    for n in range(3):
        (cam / f"{n}.jpg").write_bytes(jpeg(40 * n))
    ids = []
    for run in range(3):
        (tmp_path / "out.jsonl").unlink(missing_ok=True)
        cfg = load_config(cfg_path)
        assert cfg.state_dir is not None
        if run == 2:  # the record gone: every kept file is new again, under the same ids
            shutil.rmtree(cfg.state_dir / "kept")
        agent = Agent(cfg, cfg_path)
        agent.start()
        if run == 1:  # a restart beside the record: nothing scored twice, a new file scored
            (cam / "3.jpg").write_bytes(jpeg(200))
            wait_for(lambda: len(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")) == 1)
            time.sleep(1.0)
            results = of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")
            agent.stop()
            assert [r["item"] for r in results] == ["3.jpg"]
            (cam / "3.jpg").unlink()
            continue
        wait_for(
            lambda: len(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")) == 3,
            what="three results",
        )
        agent.stop()
        ids.append(sorted(r["id"] for r in of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")))
    assert ids[0] == ids[1] and len(set(ids[0])) == 3
    assert sorted(p.name for p in cam.iterdir()) == ["0.jpg", "1.jpg", "2.jpg"]


def test_small_inflight_budget_loses_no_file(tmp_path: Path, models: Path) -> None:
    size = len(jpeg(0))
    cfg_path = write_config(tmp_path, inflight="40KiB")  # room for ~3 items as charged
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for n in range(60):
            (cam / f"{n:03d}.jpg").write_bytes(jpeg(n * 4))
        wait_for(
            lambda: len(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")) == 60,
            timeout=60,
            what="60 results",
        )
        # the cap, plus what the decodes under way hold on top of it (taken even over the
        # cap, so intake pauses meanwhile): at most one full-size decode per worker
        decodes = agent.workers * max(decode_cost(read_header(jpeg(n * 4))) for n in range(60))
        assert agent.budget.peak <= 40 * 1024 + decodes
        assert agent.budget.cost(size, "image") > 10 * 1024  # model input + copies charged
    finally:
        agent.stop()
    results = of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")
    assert sorted(r["item"] for r in results) == [f"{n:03d}.jpg" for n in range(60)]
    assert list(cam.iterdir()) == []


def _agent_process(cfg: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cfg.parent,
    )


def test_cli_sighup_reloads_valid_config_and_sigterm_drains(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path)
    out, agent_log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    with open(agent_log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg_path)]
            + ["--drain-timeout", "10"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="source folder created at start")
        (cam / "a.jpg").write_bytes(jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="first result")

        good = cfg_path.read_text()
        cfg_path.write_text(good.replace("max_items: 8", "max_items: -3"))  # invalid
        proc.send_signal(signal.SIGHUP)
        (cam / "b.jpg").write_bytes(jpeg(240))  # still served by the old configuration
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 2, what="result after bad HUP")
        # a SIGHUP is read once no other came for a moment: this one, before the next edit
        wait_for(lambda: "reload refused" in agent_log.read_text(), what="the bad reload refused")

        doc = yaml.safe_load(good)
        doc["sources"].append(
            {
                "name": "logs",
                "path": "in/logs",
                "modality": "json",
                "window": {"seconds": "50ms"},
                "on_done": "delete",
            }
        )
        doc["sources"][0]["window"]["seconds"] = "30s"  # cam windows now stay open long
        doc["sources"][0]["window"]["close_when_idle"] = False
        cfg_path.write_text(yaml.safe_dump(doc))
        proc.send_signal(signal.SIGHUP)
        logs = tmp_path / "in/logs"
        wait_for(logs.is_dir, what="new source folder created by the reload")
        (logs / "x.json").write_bytes(b'{"ok": true}')
        wait_for(
            lambda: any(r["source"] == "logs" for r in of_kind(read_jsonl(out), "/result")),
            what="result from the source added by the reload",
        )

        # a window still open when SIGTERM arrives is closed and finished before exit
        (cam / "c.jpg").write_bytes(jpeg(20))

        def c_taken() -> bool:
            health = of_kind(read_jsonl(out), "/health")
            return bool(health) and health[-1]["items"] >= 2

        wait_for(c_taken, what="c.jpg taken into an open window")
        assert not any(r["item"] == "c.jpg" for r in of_kind(read_jsonl(out), "/result"))
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = agent_log.read_text()
    assert code == 0, log[-3000:]
    assert "reload refused" in log and "max_items" in log
    lines = read_jsonl(out)
    items = sorted(r["item"] for r in of_kind(lines, "/result"))
    assert items == ["a.jpg", "b.jpg", "c.jpg", "x.json"], log
    assert of_kind(lines, "/status")[-1]["state"] == "offline"
    assert not os.path.exists(tmp_path / "in/cam/c.jpg")


@pytest.mark.broker
def test_agent_publishes_over_mqtt_to_mosquitto(tmp_path: Path, models: Path) -> None:
    import uuid

    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    prefix = f"t{uuid.uuid4().hex[:8]}"
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["mqtt"] = {"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix, "client_id": prefix}
    doc["spool"] = {"dir": "spool"}
    doc["output"] = {"jsonl": None}
    cfg_path.write_text(yaml.safe_dump(doc))

    got: list[tuple[str, dict[str, Any]]] = []
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{prefix}")
    sub.on_message = lambda c, u, m: got.append((m.topic, json.loads(m.payload)))
    sub.connect("127.0.0.1", 1883)
    sub.subscribe(f"{prefix}/#", qos=1)
    sub.loop_start()
    cam = tmp_path / "in/cam"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        (cam / "a.jpg").write_bytes(jpeg(250))
        (cam / "b.jpg").write_bytes(jpeg(5))
        wait_for(lambda: sum(t.endswith("/result") for t, _ in got) == 2, what="2 MQTT results")
        # deleted only after the broker acknowledged the results
        wait_for(lambda: list(cam.iterdir()) == [], what="on_done delete after PUBACK")
    finally:
        agent.stop()
        sub.loop_stop()
        sub.disconnect()
    results = {p["item"]: p["label"] for t, p in got if t == f"{prefix}/test-dev/cam/result"}
    assert results == {"a.jpg": "bright", "b.jpg": "dark"}
    assert any(t == f"{prefix}/test-dev/status" and p["state"] == "online" for t, p in got)
    assert not (tmp_path / "out.jsonl").exists()


def test_camera_source_frames_are_scored_without_touching_disk(
    tmp_path: Path, models: Path
) -> None:
    import cv2

    video = tmp_path / "clip.avi"
    vw = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 25, (32, 32))
    values = [10, 240, 10, 240, 240]
    for v in values:
        vw.write(np.full((32, 32, 3), v, dtype=np.uint8))
    vw.release()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"] = [
        {
            "name": "live",
            "kind": "camera",
            "url": str(video),
            "fps": 50,
            "modality": "image",
            "window": {"seconds": "100ms", "max_items": 4},
        }
    ]
    cfg_path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(
            lambda: len(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")) == 5,
            what="five frame results",
        )
    finally:
        agent.stop()
    results = sorted(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result"), key=lambda r: r["ts"])
    assert [r["label"] for r in results] == ["dark", "bright", "dark", "bright", "bright"]
    assert all(r["source"] == "live" and r["item"].startswith("frame-") for r in results)
    assert not (tmp_path / "quarantine").exists()


@pytest.mark.parametrize("fail", [2, 1000])
def test_failed_window_is_retried_then_quarantined(tmp_path: Path, models: Path, fail: int) -> None:
    from cdml_edge.agent.app import WINDOW_ATTEMPTS

    cfg_path = write_config(tmp_path)
    out = tmp_path / "out.jsonl"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    runner = agent.runners["image"]
    runner.session = FailingSession(runner.session, fail)
    cam = tmp_path / "in/cam"
    try:
        write_atomic(cam / "a.jpg", jpeg(250))
        if fail < WINDOW_ATTEMPTS:  # a transient failure: retried, then scored and deleted
            wait_for(
                lambda: len(of_kind(read_jsonl(out), "/result")) == 1,
                timeout=30,
                what="result after retries",
            )
            wait_for(lambda: not (cam / "a.jpg").exists(), what="a.jpg deleted")
        else:  # a lasting one: quarantined after WINDOW_ATTEMPTS windows, with an event
            wait_for(
                lambda: (tmp_path / "quarantine/cam/a.jpg").exists(),
                timeout=30,
                what="a.jpg quarantined",
            )
            wait_for(
                lambda: any(e.get("quarantined_path") for e in of_kind(read_jsonl(out), "/error")),
                what="quarantine error event",
            )
    finally:
        agent.stop()
    lines = read_jsonl(out)
    errors = of_kind(lines, "/error")
    assert not (cam / "a.jpg").exists()
    if fail < WINDOW_ATTEMPTS:
        assert [r["item"] for r in of_kind(lines, "/result")] == ["a.jpg"]
        assert len(errors) == fail and runner.session.calls == fail + 1
    else:
        assert of_kind(lines, "/result") == []
        assert runner.session.calls == WINDOW_ATTEMPTS
        last = [e for e in errors if e.get("quarantined_path")]
        assert len(last) == 1 and last[0]["item"] == "a.jpg"
        assert f"failed in {WINDOW_ATTEMPTS} windows" in last[0]["message"]
        assert len(errors) == WINDOW_ATTEMPTS + 1  # one per failed window + the quarantine


def test_file_too_large_is_never_read_and_left_when_quarantine_cannot_hold_it(
    tmp_path: Path, models: Path
) -> None:
    """2 GiB (sparse): over any window and over quarantine.max_bytes (256 MiB) as well.

    It used to be moved to quarantine and deleted there by the bound, the event naming a
    file that no longer existed; it is now left in place and the event says so.
    """
    cfg_path = write_config(tmp_path)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    with open(cam / "huge.jpg", "wb") as fh:
        fh.truncate(2**31)  # sparse: 2 GiB that take no disk
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        write_atomic(cam / "ok.jpg", jpeg(200))
        out = tmp_path / "out.jsonl"
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) >= 1, what="error event")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) >= 1, what="result")
    finally:
        agent.stop()
    assert agent.budget.peak < 2**31
    (err,) = of_kind(read_jsonl(tmp_path / "out.jsonl"), "/error")
    assert err["item"] == "huge.jpg" and f"too large: {2**31} bytes" in err["message"]
    assert "left in place" in err["message"] and err["quarantined_path"] is None
    assert (cam / "huge.jpg").stat().st_size == 2**31


class _FullDiskOutput:
    """The real JSON-lines output, made to raise ENOSPC on its first ``fail`` result batches."""

    def __init__(self, real: Any, fail: int) -> None:
        self.real, self.fail, self.failed = real, fail, 0

    def publish_batch(self, msgs: Any, on_durable: Any = None, on_given_up: Any = None) -> None:
        if any(m.topic.endswith("result") for m in msgs) and self.failed < self.fail:
            self.failed += 1
            raise OSError(28, "No space left on device")
        self.real.publish_batch(msgs, on_durable, on_given_up)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_output_failure_keeps_files_and_releases_the_budget_once(
    tmp_path: Path, models: Path
) -> None:
    from cdml_edge.agent.app import WINDOW_ATTEMPTS
    from cdml_edge.outputs.factory import make_output

    cfg_path = write_config(tmp_path)
    cfg = load_config(cfg_path)
    output = _FullDiskOutput(make_output(cfg), fail=WINDOW_ATTEMPTS + 1)
    agent = Agent(cfg, cfg_path, output=output)  # type: ignore[arg-type]
    ledger = {"acquired": 0, "released": 0}
    acquire, release = agent.budget.try_acquire, agent.budget.release

    def counted_acquire(n: int) -> bool:
        ok = acquire(n)
        ledger["acquired"] += n if ok else 0
        return ok

    def counted_release(n: int) -> None:
        ledger["released"] += n
        release(n)

    agent.budget.try_acquire = counted_acquire  # type: ignore[method-assign]
    agent.budget.release = counted_release  # type: ignore[method-assign]
    out = tmp_path / "out.jsonl"
    cam = tmp_path / "in/cam"
    agent.start()
    try:
        write_atomic(cam / "a.jpg", jpeg(250))
        wait_for(
            lambda: len(of_kind(read_jsonl(out), "/result")) == 1,
            timeout=30,
            what="result once the output recovers",
        )
        wait_for(lambda: not (cam / "a.jpg").exists(), what="a.jpg deleted")
        wait_for(
            lambda: of_kind(read_jsonl(out), "/health")[-1]["errors"] >= output.failed,
            what="output failures in health",
        )
    finally:
        agent.stop()
    assert output.failed == WINDOW_ATTEMPTS + 1
    assert not (tmp_path / "quarantine").exists()  # not the file's fault
    assert [r["item"] for r in of_kind(read_jsonl(out), "/result")] == ["a.jpg"]
    assert ledger["acquired"] > 0 and ledger["released"] == ledger["acquired"]


def test_cli_sighup_with_an_unloadable_model_keeps_running(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path)
    out = tmp_path / "out.jsonl"
    proc = _agent_process(cfg_path, "--drain-timeout", "10")
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="source folder created at start")
        (cam / "a.jpg").write_bytes(jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="first result")
        good = cfg_path.read_text()
        # validates, but names a model file that does not exist
        cfg_path.write_text(good.replace("models/brightness.onnx", "models/missing.onnx"))
        proc.send_signal(signal.SIGHUP)
        (cam / "b.jpg").write_bytes(jpeg(240))  # still served by the old configuration
        wait_for(
            lambda: len(of_kind(read_jsonl(out), "/result")) == 2 or proc.poll() is not None,
            what="result after the refused reload",
        )
        assert proc.poll() is None, "agent exited on a refused reload"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        log = proc.stdout.read() if proc.stdout else ""
        print(log)
    assert code == 0, log
    assert "reload refused" in log and "missing.onnx" in log, log
    lines = read_jsonl(out)
    assert sorted(r["item"] for r in of_kind(lines, "/result")) == ["a.jpg", "b.jpg"]
    assert [s["state"] for s in of_kind(lines, "/status")] == ["online", "offline"]
