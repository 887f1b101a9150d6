"""SIGHUP on a hand-edited ``factory.yaml``: real ``cdml-edge run`` processes, real files.

* an edit that adds a second ``sources:`` section (YAML keeps the last) is refused and the
  running sources keep scoring; before, the reload applied it and the first list's sources
  silently stopped being watched;
* an edit whose ``output.jsonl`` lies under a file (the last run's output taken for a folder)
  is refused by ``config validate`` and by the reload; before, both took it, and the reload
  stopped every source, then died on the output with exit status 1;
* a reload that removes an RTSP camera (GStreamer's RTSP server) ends its capture process,
  leaving no zombie, and one that brings it back starts a new one, while files of a folder
  source keep flowing: none lost, none scored twice.

A reload moves the metrics endpoint with ``health.metrics_port``, and a reload whose start
fails after the drain (an ``output.jsonl`` folder that cannot be made) goes back to the
running configuration; before, the old port kept serving and the agent ended with exit 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic, write_config
from helpers.camera_servers import RtspServer
from helpers.paths import ROOT

pytestmark = pytest.mark.slow  # agent processes, reloads, a capture process


def _run(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=cfg.parent,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
        )


def _results(out: Path) -> list[dict]:
    return of_kind(read_jsonl(out), "/result")


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_second_sources_section_is_refused_and_the_running_ones_keep_scoring(
    tmp_path: Path, models: Path
) -> None:
    cfg = write_config(tmp_path)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="the source folder")
        # the 2 a.m. edit: a new source pasted as a whole section at the end
        cfg.write_text(
            cfg.read_text()
            + "sources:\n  - {name: other, path: in/other, modality: image, on_done: delete}\n"
        )
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in log.read_text(), what="the refusal")
        write_atomic(cam / "after.jpg", jpeg(40))
        wait_for(lambda: len(_results(out)) == 1, timeout=20, what="cam still scored")
        assert not (tmp_path / "in/other").exists()
    finally:
        _stop(proc, log)
    text = log.read_text()
    assert "sources: duplicate key (line" in text, text[-3000:]
    assert text.count("reload refused") == 1


def test_a_reload_whose_output_cannot_be_made_keeps_the_running_configuration(
    tmp_path: Path, models: Path
) -> None:
    cfg = write_config(tmp_path)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="the source folder")
        cfg.write_text(cfg.read_text().replace("jsonl: out.jsonl", "jsonl: out.jsonl/day.jsonl"))
        validate = subprocess.run(
            [sys.executable, "-m", "cdml_edge.cli", "config", "validate", "--config", str(cfg)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert validate.returncode == 2, validate.stdout + validate.stderr
        assert "output.jsonl:" in validate.stderr and "is not a folder" in validate.stderr
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in log.read_text(), what="the refusal")
        write_atomic(cam / "after.jpg", jpeg(40))
        wait_for(lambda: len(_results(out)) == 1, timeout=20, what="cam still scored")
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        _stop(proc, log)


def _answers(port: int) -> bool:
    """Whether the metrics endpoint answers on ``port`` (200 or 503)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # 503 is an answer
    except OSError:
        return False


def test_a_reload_moves_the_metrics_endpoint(tmp_path: Path, models: Path) -> None:
    from helpers.ports import free_ports

    old, new = free_ports(2)
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace("health: {", f"health: {{metrics_port: {old}, "))
    log = tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        wait_for(lambda: _answers(old), timeout=60, what="the metrics endpoint")
        cfg.write_text(cfg.read_text().replace(f"metrics_port: {old}", f"metrics_port: {new}"))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloading" in log.read_text(), what="the reload")
        wait_for(lambda: _answers(new), timeout=20, what="the endpoint on the new port")
        assert not _answers(old)
    finally:
        _stop(proc, log)


def test_a_reload_whose_start_fails_keeps_the_agent_running(tmp_path: Path, models: Path) -> None:
    cfg = write_config(tmp_path)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        # passes every check (/proc is a folder), fails when the output starts: ENOENT
        cfg.write_text(cfg.read_text().replace("jsonl: out.jsonl", "jsonl: /proc/cdml/x.jsonl"))
        proc.send_signal(signal.SIGHUP)
        time.sleep(3)
        assert proc.poll() is None, log.read_text()[-3000:]
        write_atomic(cam / "after.jpg", jpeg(40))
        wait_for(lambda: len(_results(out)) == 1, timeout=20, what="cam still scored")
    finally:
        _stop(proc, log)


def test_a_reload_whose_spool_cannot_be_made_keeps_the_agent_running(
    tmp_path: Path, models: Path
) -> None:
    """The new output is built after the drain; a spool folder it cannot make ended the agent.

    (Under systemd: exit 1, five restarts, then the unit stayed failed.)
    """
    from helpers.ports import free_port

    cfg = write_config(tmp_path)
    dead = f"mqtt://127.0.0.1:{free_port()}"
    cfg.write_text(
        cfg.read_text() + f"mqtt: {{url: '{dead}', client_id: reload-spool-{os.getpid()}}}\n"
        "spool: {dir: spool}\n"
    )
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        cam = tmp_path / "in/cam"
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        cfg.write_text(cfg.read_text().replace("spool: {dir: spool}", "spool: {dir: /proc/x/y}"))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload failed while applying it" in log.read_text(), what="refused")
        assert proc.poll() is None, log.read_text()[-3000:]
        write_atomic(cam / "after.jpg", jpeg(40))
        wait_for(lambda: len(_results(out)) == 1, timeout=20, what="cam still scored")
    finally:
        _stop(proc, log)


def _captures(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    kids = psutil.Process(proc.pid).children(recursive=True)
    return [k for k in kids if "cdml_edge.intake.camera.worker" in " ".join(k.cmdline())]


def test_a_camera_removed_and_added_back_by_reload(tmp_path: Path, models: Path) -> None:
    server = RtspServer()
    server.start()
    cfg = write_config(tmp_path)
    plain = cfg.read_text()
    camera = (
        "  - {name: gate, kind: camera, url: '" + server.url + "', modality: image, fps: 2,\n"
        "     read_timeout: 2s, window: {seconds: 0.2}}\n"
    )
    with_camera = plain.replace("sources:\n", "sources:\n" + camera, 1)
    cfg.write_text(with_camera)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    written: list[str] = []
    stop = threading.Event()

    def feed() -> None:
        n = 0
        while not stop.is_set():
            name = f"{n:04d}.jpg"
            write_atomic(tmp_path / "in/cam" / name, jpeg(n % 250))
            written.append(name)
            n += 1
            time.sleep(0.03)

    feeder = threading.Thread(target=feed)
    try:
        wait_for(lambda: len(_captures(proc)) == 1, timeout=60, what="the capture process")
        first = _captures(proc)[0]
        wait_for(
            lambda: any(r["source"] == "gate" for r in _results(out)), timeout=60, what="frames"
        )
        feeder.start()
        time.sleep(1.0)
        cfg.write_text(plain)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: not first.is_running(), timeout=30, what="the capture process gone")
        assert _captures(proc) == []  # no zombie left either
        time.sleep(1.0)
        cfg.write_text(with_camera)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(_captures(proc)) == 1, timeout=60, what="a new capture process")
        assert _captures(proc)[0].pid != first.pid
        time.sleep(1.0)
        stop.set()
        feeder.join()
        wait_for(lambda: not any((tmp_path / "in/cam").iterdir()), timeout=30, what="drained")
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join()
        _stop(proc, log)
        server.stop()
    scored = [r["item"] for r in _results(out) if r["source"] == "cam"]
    assert sorted(scored) == sorted(written)  # none lost, none twice
    assert "reload refused" not in log.read_text()


def test_a_burst_of_sighups_is_one_reload(tmp_path: Path, models: Path) -> None:
    """Ten SIGHUPs in half a second drained and reloaded about five times: now once."""
    cfg = write_config(tmp_path)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = _run(cfg, log)
    try:
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        for _ in range(10):
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.05)
        wait_for(lambda: "agent ready" in log.read_text().split("reloading", 1)[-1], what="ready")
        time.sleep(2.0)
        assert log.read_text().count("reloading ") == 1, log.read_text()[-3000:]
        write_atomic(tmp_path / "in/cam" / "after.jpg", jpeg(40))
        wait_for(lambda: len(_results(out)) == 1, timeout=20, what="scored after the reload")
    finally:
        _stop(proc, log)
