"""Helpers of the install checks (test_matrix.py, check_lowest.py).

Find the boards' Pythons, build the wheel for one, make a fresh venv with uv.

Interpreters are looked up as ``python3.X`` on PATH, then among pyenv's versions; the
variable ``CDML_PYTHON_3_X`` (for example ``CDML_PYTHON_3_10=/usr/bin/python3.10``) names one
directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# JetPack 6, Raspberry Pi OS 12 (Bookworm), Raspberry Pi OS 13 / Debian 13 (Trixie).
BOARD_PYTHONS = {"3.10": "JetPack 6", "3.11": "Pi OS Bookworm", "3.13": "Pi OS Trixie / Debian 13"}
# What tests beside the runtime need (the dev extra without the tools of other extras).
TEST_TOOLS = [
    "pytest>=8",
    "pytest-timeout>=2.2",
    "psutil>=5.9",
    "hypothesis>=6",
    "jsonschema>=4",
    "onnx>=1.15",
    "cryptography>=41",
]


def uv() -> list[str]:
    """The uv command (the dev extra installs it beside this Python)."""
    exe = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    return [exe] if exe else [sys.executable, "-m", "uv"]


def _version_of(exe: str) -> str | None:
    try:
        res = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def _pyenv_candidates(minor: str) -> list[str]:
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    res = subprocess.run([pyenv, "root"], capture_output=True, text=True)
    versions = Path(res.stdout.strip()) / "versions"
    found = sorted(versions.glob(f"{minor}.*/bin/python{minor}"), reverse=True)
    return [str(p) for p in found]


def find_python(minor: str) -> tuple[str | None, str]:
    """The interpreter for ``minor`` ("3.10"), or None and why none was found."""
    named = os.environ.get("CDML_PYTHON_" + minor.replace(".", "_"))
    candidates = [named] if named else []
    on_path = shutil.which(f"python{minor}")
    candidates += ([on_path] if on_path else []) + _pyenv_candidates(minor)
    for exe in candidates:
        if exe and _version_of(exe) == minor:
            return exe, ""
    return (
        None,
        f"no Python {minor} (python{minor} on PATH, pyenv, CDML_PYTHON_{minor[0]}_{minor[2:]})",
    )


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; raise with its output when it fails."""
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        tail = (res.stdout + res.stderr)[-4000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} -> exit {res.returncode}\n{tail}")
    return res


def build_wheel(python: str, out: Path, src: Path = REPO) -> Path:
    """Build the wheel of ``src`` for ``python`` (native reader included) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    run([*uv(), "build", "--quiet", "--wheel", "--python", python, "--out-dir", str(out), str(src)])
    new = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob("*.whl"))
    tag = "cp" + _version_of(python).replace(".", "")  # type: ignore[union-attr]
    wheels = [w for w in new if f"-{tag}-" in w.name]
    if not wheels:
        raise RuntimeError(f"no {tag} wheel in {out}: the native reader was not built")
    return wheels[-1]


def fresh_venv(python: str, where: Path) -> Path:
    """A new venv at ``where`` (removed first); returns its python."""
    if where.exists():
        shutil.rmtree(where)
    run([*uv(), "venv", "--quiet", "--python", python, str(where)])
    return where / "bin" / "python"


def pip_install(venv_python: Path, *args: str) -> None:
    """``uv pip install`` into the venv of ``venv_python``."""
    run([*uv(), "pip", "install", "--quiet", "--python", str(venv_python), *args])
