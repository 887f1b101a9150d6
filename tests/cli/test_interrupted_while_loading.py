"""Ctrl-C while the command line is still loading its commands: exit 130, no traceback.

Before, the console script imported every command module before anything could catch a
KeyboardInterrupt: a Ctrl-C in the first second or so (longer on a board) printed about
30 lines of traceback, which docs/cli.md promises never to show.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.paths import ROOT

from cdml_edge.entry import INTERRUPTED


@pytest.mark.parametrize("delay", [0.3, 0.6])
def test_ctrl_c_while_loading_is_a_quiet_exit_130(tmp_path: Path, delay: float) -> None:
    config = ROOT / "configs" / "demo.yaml"
    out = tmp_path / "out.jsonl"
    command = ["tail", "--config", str(config), "--file", str(out), "--duration", "30"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cdml_edge.entry import main; main()", *command, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode in (0, INTERRUPTED), (proc.returncode, err)


def test_the_console_script_is_the_quiet_entry() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["cdml-edge"] == "cdml_edge.entry:main"
