"""Under systemd the agent's log lines carry their syslog priority for journald.

Every line was priority 6 (``journalctl -p warning`` showed nothing) and carried its time
twice. journald names its stream in ``$JOURNAL_STREAM`` (``dev:inode``); here stderr is a
file and the variable names that file, as systemd names its socket.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from helpers.agent_runs import write_config
from helpers.paths import ROOT

from cdml_edge.commands.journal_logs import JournalFormatter


def _run(cfg: Path, err: Path, journal: bool) -> list[str]:
    with open(err, "wb") as sink:
        st = os.fstat(sink.fileno())
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("JOURNAL_STREAM", None)
        if journal:
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        subprocess.run(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg)]
            + ["--duration", "1"],
            stderr=sink,
            stdout=subprocess.DEVNULL,
            cwd=cfg.parent,
            env=env,
            timeout=120,
            check=True,
        )
    return err.read_text().splitlines()


def test_lines_to_journald_carry_their_priority(tmp_path: Path, models: Path) -> None:
    cfg = write_config(tmp_path)
    lines = _run(cfg, tmp_path / "journal.txt", journal=True)
    assert lines and all(ln[:3] in ("<2>", "<3>", "<4>", "<6>", "<7>") for ln in lines), lines
    assert any(ln.startswith("<6>cdml_edge.agent.app: agent ready") for ln in lines), lines
    plain = _run(cfg, tmp_path / "terminal.txt", journal=False)
    assert any(" INFO cdml_edge.agent.app: agent ready" in ln for ln in plain), plain
    assert not any(ln.startswith("<") for ln in plain)


def test_every_line_of_a_message_keeps_its_priority() -> None:
    fmt = JournalFormatter("%(message)s")
    record = logging.LogRecord("cdml_edge.x", logging.WARNING, "f", 1, "a\nb", None, None)
    assert fmt.format(record) == "<4>cdml_edge.x: a\n<4>b"
    record = logging.LogRecord("cdml_edge.x", logging.ERROR, "f", 1, "bad", None, None)
    assert fmt.format(record) == "<3>cdml_edge.x: bad"
