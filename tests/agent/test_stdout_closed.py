"""``cdml-edge run ... | head -n 1``: results to stdout, and its reader goes away.

A closed stdout is not a passing fault: the agent says so in one line and stops with exit 1,
the files left in the folder for the next run; no retry loop, no traceback at the stop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers.agent_runs import jpeg, write_atomic
from helpers.paths import ROOT

FILES = 49
STOPPING = "stdout is closed: nothing takes the results; stopping"


def _config(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        textwrap.dedent(
            f"""
            sources:
              - {{name: cam, kind: folder, path: in, modality: image}}
            models:
              image: {{path: {ROOT / "models/digits.onnx"}}}
            output: {{jsonl: "-"}}
            state_dir: state
            """
        )
    )
    return cfg


def test_a_closed_stdout_stops_the_agent_with_one_line_and_exit_1(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    err = tmp_path / "s.err"
    with open(err, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg)],
            stdout=subprocess.PIPE,
            stderr=sink,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # `head -n 1`: the retained status, "online"
        assert b'"state":"online"' in first, first
        proc.stdout.close()  # ... and head exits
        for i in range(FILES):  # then the files come: their results have nowhere to go
            write_atomic(tmp_path / "in" / f"f{i:03d}.jpg", jpeg(i * 5))
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = err.read_text()
    assert code == 1, f"exit {code}; the log ends:\n{log[-3000:]}"
    assert log.count(STOPPING) == 1, log[-3000:]
    assert "Traceback" not in log, log
    assert "Exception ignored" not in log, log  # nothing left to flush at exit either
    assert len(list((tmp_path / "in").glob("*.jpg"))) == FILES  # kept for the next run
    assert not (tmp_path / "state/quarantine").exists() or not any(
        (tmp_path / "state/quarantine").rglob("*.jpg")
    )
