"""One state folder per agent.

Defaults live in ``state_dir`` whatever the working directory, and a second agent on the same
state is refused with exit status 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.ports import free_port
from typer.testing import CliRunner

from cdml_edge.cli import app


def _start_agent(config: Path, cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "STATE_DIRECTORY"}
    return subprocess.Popen(
        [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(config), "--duration", "60"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_locked(lock: Path, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if lock.exists() and lock.read_text().strip() == str(proc.pid):
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError("the first agent never took its state folder")


@pytest.mark.parametrize("output", ["jsonl", "mqtt"])
def test_second_agent_on_the_same_state_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    """The same config started from two working directories: one state folder.

    So the second agent is refused (it used to start on a second spool beside the first).
    """
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    conf = tmp_path / "etc"
    conf.mkdir()
    sink = (
        "output: {jsonl: out.jsonl}"
        if output == "jsonl"
        else (f'mqtt: {{url: "mqtt://127.0.0.1:{free_port()}"}}')
    )
    config = conf / "line.yaml"
    config.write_text(
        textwrap.dedent(f"""
        device: {{id: edge-1}}
        {sink}
    """)
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _start_agent(config, tmp_path / "a")
    try:
        _wait_locked(conf / "line.state" / "agent.lock", first)
        monkeypatch.chdir(tmp_path / "b")
        r = CliRunner().invoke(app, ["run", "--config", str(config), "--duration", "1"])
        assert r.exit_code == 2, r.output
        # the documented message, also where the spool (inside the state folder) is taken
        assert "state folder in use" in r.output and str(conf / "line.state") in r.output
        assert f"pid {first.pid}" in r.output
        assert not (tmp_path / "a" / "spool").exists() and not (tmp_path / "b" / "spool").exists()
    finally:
        first.terminate()
        first.wait(30)


def test_a_state_folder_that_cannot_be_made_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "f.yaml"
    config.write_text("state_dir: /proc/cdml-edge-state\noutput: {jsonl: out.jsonl}\n")
    r = CliRunner().invoke(app, ["run", "--config", str(config), "--duration", "0.2"])
    assert r.exit_code == 2, r.output
    assert "/proc/cdml-edge-state: cannot use the state folder" in r.output


def test_a_reload_naming_the_same_state_folder_another_way_keeps_it(tmp_path: Path) -> None:
    """Through a link or with ``..``: the same folder, not a second lock on it (refused)."""
    from cdml_edge.agent.app import Agent
    from cdml_edge.config import load_config

    (tmp_path / "state").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "state")
    config = tmp_path / "f.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\noutput: {{jsonl: out.jsonl}}\n")
    agent = Agent(load_config(config), config)
    agent.start()
    try:
        for written in (tmp_path / "link", tmp_path / "link" / ".." / "state"):
            config.write_text(f"state_dir: {written}\noutput: {{jsonl: out.jsonl}}\n")
            assert agent.reload(), written
    finally:
        agent.stop()
