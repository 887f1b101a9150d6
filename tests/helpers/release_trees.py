"""Copies of the checkout as a release of a given version, for the install tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from helpers.paths import ROOT as REPO


def source_tree(dest: Path, version: str, broken: bool = False) -> Path:
    """A copy of the checkout as release ``version`` (``broken``: the agent cannot start)."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        if (REPO / name).is_file() and not name.startswith(("tests/", "scripts/bench")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    init = dest / "cdml_edge/__init__.py"
    init.write_text(
        re.sub(r'__version__ = "[^"]+"', f'__version__ = "{version}"', init.read_text())
    )
    if broken:
        app = dest / "cdml_edge/agent/app.py"
        app.write_text('raise ImportError("a broken build")\n' + app.read_text())
    return dest
