"""Out of inotify instances: the agent polls its folders, says so, and loses nothing.

The kernel's per-user limit (``fs.inotify.max_user_instances``, 128 by default) is shared by
every process of the service's user; past it, a source died at every arm and restarted for
ever, taking no file. The agent runs here in a user namespace of its own whose limit is 0
(as root can set for a namespace it made), so no other test is touched.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.agent_runs import (
    cam_config,
    jpeg,
    of_kind,
    read_jsonl,
    start_agent,
    wait_for,
    write_atomic,
)

NO_INOTIFY = 'echo 0 > /proc/sys/user/max_inotify_instances && exec "$@"'


def _namespace_without_inotify() -> list[str] | None:
    """The command prefix of a user namespace allowed no inotify instance, if one can be made."""
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "-U", "-r", "sh", "-c", NO_INOTIFY, "sh"]
    probe = "import ctypes; print(ctypes.CDLL(None).inotify_init1(0))"
    try:
        got = subprocess.run(
            [*prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=30
        )
    except OSError:
        return None
    return prefix if got.returncode == 0 and got.stdout.strip() == "-1" else None


def test_a_folder_is_polled_when_inotify_is_exhausted(tmp_path: Path) -> None:
    prefix = _namespace_without_inotify()
    if prefix is None:
        pytest.skip("needs unshare and a user namespace with its own inotify limit")
    cfg = cam_config(
        tmp_path,
        "output: {jsonl: out.jsonl}\nhealth: {interval: 0.2s}\n",
        max_items=1,
    )
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = start_agent(cfg, log, cwd=tmp_path, prefix=prefix)
    try:
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        for i in range(3):
            write_atomic(tmp_path / "in/cam1" / f"{i}.jpg", jpeg(40 * i))
        wait_for(
            lambda: len(of_kind(read_jsonl(out), "/result")) == 3, timeout=30, what="3 results"
        )
        health = of_kind(read_jsonl(out), "/health")[-1]
        assert "polled every" in health["degraded"]["source cam1"], health
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert said.count("inotify refused a watch") == 1, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    assert not list((tmp_path / "in/cam1").iterdir())  # on_done: delete, each taken once
