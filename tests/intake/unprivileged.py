"""Run a command that cannot read a ``chmod 000`` folder, even as root.

Root's ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` bypass a folder's mode: as root the
command runs under ``setpriv`` with both dropped; any other user runs it as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DROP = "-dac_override,-dac_read_search"


def unprivileged(tmp_path: Path) -> list[str] | None:
    """The prefix that runs a command unable to read a ``chmod 000`` folder, if any."""
    prefix = (
        [] if os.geteuid() != 0 else ["setpriv", f"--bounding-set={DROP}", f"--inh-caps={DROP}"]
    )
    if prefix and shutil.which("setpriv") is None:
        return None
    probe = tmp_path / "probe"
    probe.mkdir(mode=0)
    try:
        got = subprocess.run(
            [*prefix, sys.executable, "-c", f"import os; os.listdir({str(probe)!r})"],
            capture_output=True,
            timeout=30,
        )
    finally:
        probe.rmdir()
    return prefix if b"PermissionError" in got.stderr else None
