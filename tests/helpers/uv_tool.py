"""uv for the tests: the dev extra installs it beside the venv's Python."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def uv_command() -> list[str]:
    """The uv executable, as a command list."""
    exe = shutil.which("uv", path=str(Path(sys.executable).parent))
    if exe is None:
        from uv import find_uv_bin

        exe = find_uv_bin()
    return [exe]
