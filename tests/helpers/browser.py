"""A real headless Chromium for the tests (from the OS packages; ``.ci/run`` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-extensions",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("Chromium is not installed (.ci/run installs the 'chromium' package)")
    return exe


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def dump_dom(url: str, profile: Path) -> str:
    """The DOM Chromium built from ``url``, serialised."""
    res = _run(["--dump-dom", url], profile)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def screenshot(url: str, out: Path, profile: Path, size: tuple[int, int] = (1100, 1300)) -> Path:
    """A PNG of ``url`` as Chromium draws it."""
    res = _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url], profile)
    assert res.returncode == 0 and out.is_file(), res.stderr[-2000:]
    return out
