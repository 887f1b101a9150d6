"""``tail --file`` on a file that is not there yet says so; on a named pipe it refuses.

Before, a missing file showed ``0 messages`` and ``health: none yet`` and exited 0, never
saying the file did not exist (a typo looked like an idle agent); a FIFO blocked the
follower, which took about 5 s to end after Ctrl-C.
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.paths import ROOT
from typer.testing import CliRunner

from cdml_edge.cli import app

CONFIG = str(ROOT / "configs" / "demo.yaml")


def test_a_missing_file_is_named_while_waiting_for_it(tmp_path: Path) -> None:
    out = tmp_path / "nope.jsonl"
    args = ["tail", "--config", CONFIG, "--file", str(out), "--duration", "0.3", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{out} does not exist yet" in result.output


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    args = ["tail", "--config", CONFIG, "--file", str(fifo), "--duration", "0.3", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.output
