"""A spool or retention folder the agent cannot make: one line and exit 2, not a traceback.

Exit 1 with a traceback made systemd restart the agent five times, then give up on the unit;
exit 2 is the configuration's fault, which the unit does not restart (as for the state
folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.agent_runs import write_config
from helpers.paths import ROOT
from helpers.ports import free_port

CANNOT_BE_MADE = "/proc/cdml-edge-none/x"  # /proc takes no new folder, even for root


@pytest.mark.parametrize(
    "extra",
    [
        "mqtt: {{url: 'mqtt://127.0.0.1:{port}', client_id: start-{pid}}}\n"
        "spool: {{dir: " + CANNOT_BE_MADE + "}}\n",
        "retention: {{dir: " + CANNOT_BE_MADE + ", max_bytes: 1MiB}}\n",
    ],
    ids=["spool", "retention"],
)
def test_a_folder_that_cannot_be_made_is_exit_2_in_one_line(
    tmp_path: Path, models: Path, extra: str
) -> None:
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text() + extra.format(port=free_port(), pid=os.getpid()))
    proc = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg), "--duration", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("cdml-edge run: ")]
    assert len(said) == 1 and "cdml-edge-none" in said[0], proc.stderr[-3000:]
