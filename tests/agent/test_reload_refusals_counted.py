"""Every refused reload is counted and shown, as Prometheus shows its own.

A real ``cdml-edge run`` process, its metrics over real HTTP, real SIGHUPs. Before, a reload
refused because the YAML did not validate (``sources: [ {name:`` appended by a hand edit)
left ``cdml_edge_errors_total{stage="reload"}`` where it was (a model file that does not
load was counted), and nothing said that the file on disk was not the running
configuration. Now each refusal is counted, ``cdml_edge_config_last_reload_successful`` is 0
until a reload is taken (1 from the start), and
``cdml_edge_config_last_reload_success_timestamp_seconds`` says when the last one was.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.agent_runs import start_agent, wait_for, write_config
from helpers.ports import free_port

pytestmark = pytest.mark.slow  # an agent process and its reloads

RELOAD_ERRORS = 'cdml_edge_errors_total{stage="reload"}'
LAST_OK = "cdml_edge_config_last_reload_successful"
LAST_OK_AT = "cdml_edge_config_last_reload_success_timestamp_seconds"


def _metrics(port: int) -> dict[str, float]:
    """The samples of ``/metrics`` by name and labels as written (``name{a="b"}``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.findall(r"^(cdml_edge_\S+) (\S+)$", text, re.M)
    return {name: float(value) for name, value in found}


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _reload(proc: subprocess.Popen[bytes], log: Path, said: str) -> None:
    """SIGHUP, then wait for the ``said``-th line of the reload's outcome in the log."""
    count = log.read_text().count(said)
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: log.read_text().count(said) > count, timeout=30, what=said)


def test_every_refused_reload_is_counted_and_the_last_one_shown(
    tmp_path: Path, models: Path
) -> None:
    port = free_port()
    cfg = write_config(tmp_path)
    good = cfg.read_text().replace("health: {", f"health: {{metrics_port: {port}, ")
    cfg.write_text(good)
    log = tmp_path / "agent.log"
    proc = start_agent(cfg, log, cwd=tmp_path)
    try:
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        start = _metrics(port)
        assert start[RELOAD_ERRORS] == 0 and start[LAST_OK] == 1
        assert start[LAST_OK_AT] == start["cdml_edge_start_time_seconds"]

        cfg.write_text(good + "sources: [ {name:\n")  # the hand edit: YAML that does not parse
        _reload(proc, log, "reload refused")
        now = _metrics(port)
        assert (now[RELOAD_ERRORS], now[LAST_OK], now[LAST_OK_AT]) == (1, 0, start[LAST_OK_AT])

        (models / "brightness.onnx").write_bytes(b"not a model")  # valid YAML, garbage model
        cfg.write_text(good)
        _reload(proc, log, "reload refused")
        now = _metrics(port)
        assert (now[RELOAD_ERRORS], now[LAST_OK]) == (2, 0)

        (models / "brightness.onnx").unlink()
        from helpers.models import brightness_classifier

        brightness_classifier(models / "brightness.onnx")
        before = time.time()
        _reload(proc, log, "reloading")
        wait_for(lambda: _metrics(port)[LAST_OK] == 1, timeout=30, what="the reload taken")
        now = _metrics(port)
        assert now[RELOAD_ERRORS] == 2 and now[LAST_OK_AT] >= before
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        _stop(proc, log)
