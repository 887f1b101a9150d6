"""A folder (or a file) the agent may not read is a state with an event, never silence.

``chmod 000`` on a watched folder used to be silent (no log line, no error, ``/healthz``
200) and the files written meanwhile were never taken once it was readable again: their
events had come while they could not be looked at, and nothing rescanned. The real agent
process runs here without the capabilities that override file permissions (root's
``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` dropped with ``setpriv``; any other user
as it is), on a real folder watched by inotify, while the test changes the modes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import (
    cam_config,
    jpeg,
    of_kind,
    read_jsonl,
    start_agent,
    wait_for,
    write_atomic,
)
from unprivileged import unprivileged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, what: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{what}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _healthz(port: int) -> tuple[int, dict[str, Any]]:
    code, text = _get(port, "healthz")
    return code, json.loads(text)


def _counted(port: int, stage: str) -> float:
    line = f'cdml_edge_errors_total{{stage="{stage}"}} '
    for row in _get(port, "metrics")[1].splitlines():
        if row.startswith(line):
            return float(row[len(line) :])
    return 0.0


def _errors(out: Path) -> list[dict[str, Any]]:
    return of_kind(read_jsonl(out), "cam1/error")


def _scored(out: Path, name: str) -> bool:
    return any(r["item"] == name for r in of_kind(read_jsonl(out), "cam1/result"))


def _wait_readable_event(out: Path) -> None:
    """The folder's episode ended: its own event on the error channel, after the first."""
    wait_for(lambda: len(_errors(out)) >= 2, what="the folder's readable-again event")
    begun, ended, *more = _errors(out)
    assert begun["error_type"] == "FolderUnreadable" and more == [], _errors(out)
    assert ended["error_type"] == "FolderReadable" and ended["item"] is None, ended
    assert "can be read again" in ended["message"], ended


def _config(tmp_path: Path, port: int) -> Path:
    cfg = cam_config(tmp_path, "output: {jsonl: out.jsonl}\n", max_items=1)
    doc = yaml.safe_load(cfg.read_text())
    doc["health"] = {"interval": "0.2s", "metrics_port": port, "metrics_host": "127.0.0.1"}
    cfg.write_text(yaml.safe_dump(doc))
    return cfg


@pytest.fixture
def agent_run(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Start the agent (unprivileged) on the ``cam1`` folder; its port, output and log.

    ``locked`` (the test's parameter, if any): the folder's mode is 0 when it starts.
    """
    prefix = unprivileged(tmp_path)
    if prefix is None:
        pytest.skip("needs setpriv (as root) or a user without permission overrides")
    port = _free_port()
    cfg, out, log = _config(tmp_path, port), tmp_path / "out.jsonl", tmp_path / "agent.log"
    os.chmod(tmp_path, 0o755)  # pytest's tmp folders are 0700: the agent's user reaches in
    if getattr(request, "param", None) == "locked":
        (tmp_path / "in/cam1").chmod(0)
    proc = start_agent(cfg, log, cwd=tmp_path, prefix=prefix)
    try:
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        yield port, out, log
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        os.chmod(tmp_path / "in/cam1", 0o755)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert "Traceback" not in said and "died" not in said, said[-3000:]


def test_an_unreadable_folder_is_reported_and_rescanned_once_readable(
    tmp_path: Path, agent_run: tuple[int, Path, Path]
) -> None:
    port, out, log = agent_run
    cam = tmp_path / "in/cam1"
    write_atomic(cam / "before.jpg", jpeg(10))
    wait_for(lambda: _scored(out, "before.jpg"), what="before.jpg's result")
    assert _healthz(port)[0] == 200

    cam.chmod(0)
    write_atomic(cam / "meanwhile.jpg", jpeg(200))  # the test may: the agent may not
    wait_for(lambda: len(_errors(out)) == 1, what="the unreadable folder's event")
    [err] = _errors(out)
    assert err["error_type"] == "FolderUnreadable" and err["item"] is None, err
    assert "cannot be read (Permission denied)" in err["message"], err
    code, health = _healthz(port)
    assert code == 503, health
    assert "folder unreadable" in health["degraded"]["source cam1"], health
    assert health["dead_threads"] == [], health
    assert _counted(port, "folder_unreadable") == 1

    cam.chmod(0o755)
    wait_for(lambda: _scored(out, "meanwhile.jpg"), what="meanwhile.jpg taken once readable")
    wait_for(lambda: _healthz(port)[0] == 200, what="/healthz 200 again")
    _wait_readable_event(out)  # the episode: one event when it began, one when it ended
    assert "can be read again" in log.read_text()
    # on_done: delete, as any scored file (after its result is written: waited for)
    wait_for(lambda: not (cam / "meanwhile.jpg").exists(), what="meanwhile.jpg deleted")


def test_an_unreadable_file_is_reported_once_and_taken_once_readable(
    tmp_path: Path, agent_run: tuple[int, Path, Path]
) -> None:
    port, out, _ = agent_run
    cam = tmp_path / "in/cam1"
    tmp = cam / "locked.jpg.tmp"
    tmp.write_bytes(jpeg(120))
    tmp.chmod(0)
    tmp.rename(cam / "locked.jpg")
    wait_for(lambda: len(_errors(out)) == 1, what="the unreadable file's event")
    [err] = _errors(out)
    assert err["error_type"] == "FileUnreadable" and err["item"] == "locked.jpg", err
    assert err["quarantined_path"] is None and "Permission denied" in err["message"], err
    assert _counted(port, "unreadable") == 1
    write_atomic(cam / "other.jpg", jpeg(30))  # the source goes on
    wait_for(lambda: _scored(out, "other.jpg"), what="other.jpg's result")
    code, health = _healthz(port)
    assert code == 200 and health["dead_threads"] == [], health
    assert (cam / "locked.jpg").exists()

    (cam / "locked.jpg").chmod(0o644)  # its mode changed: taken
    wait_for(lambda: _scored(out, "locked.jpg"), what="locked.jpg taken once readable")
    assert len(_errors(out)) == 1


@pytest.mark.parametrize("agent_run", ["locked"], indirect=True)
def test_a_folder_unreadable_at_start_is_the_same_state_and_watched_once_readable(
    tmp_path: Path, agent_run: tuple[int, Path, Path]
) -> None:
    port, out, _ = agent_run
    cam = tmp_path / "in/cam1"
    write_atomic(cam / "early.jpg", jpeg(60))
    wait_for(lambda: len(_errors(out)) == 1, what="the unreadable folder's event")
    assert _errors(out)[0]["error_type"] == "FolderUnreadable"
    code, health = _healthz(port)
    assert code == 503 and "folder unreadable" in health["degraded"]["source cam1"], health
    assert health["dead_threads"] == [], health

    cam.chmod(0o755)
    wait_for(lambda: _scored(out, "early.jpg"), what="early.jpg taken once readable")
    write_atomic(cam / "late.jpg", jpeg(90))  # watched now: taken on its event
    wait_for(lambda: _scored(out, "late.jpg"), what="late.jpg's result")
    wait_for(lambda: _healthz(port)[0] == 200, what="/healthz 200 again")
    _wait_readable_event(out)
