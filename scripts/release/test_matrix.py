"""The appliance on each board's Python (3.10, 3.11, 3.13): wheel, venv from the lock, smoke test.

For 3.10 (JetPack 6), 3.11 (Pi OS Bookworm) and 3.13 (Pi OS Trixie / Debian 13), build the
wheel with that Python, install it into a fresh venv from the lock (hash-checked, no torch)
and run scripts/release/board_smoke.py with it.

    python scripts/release/test_matrix.py [--pythons 3.10,3.13] [--keep DIR]   (make test-matrix)

A Python not found on this machine is reported as SKIPPED with the reason, never as passed.
Exit 1 when a Python found fails any step.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _venvs

from lock import lock_path

BOARD_SMOKE = Path(__file__).resolve().parent / "board_smoke.py"
NO_TORCH = (
    "import importlib.util as u, sys; sys.exit('torch is installed' if u.find_spec('torch') else 0)"
)


def check_python(minor: str, work: Path) -> tuple[str, str]:
    """(status, detail) of one Python: PASS, FAIL or SKIPPED."""
    exe, why = _venvs.find_python(minor)
    if exe is None:
        return "SKIPPED", why
    lock = lock_path(minor, platform.machine())
    if not lock.exists():
        return "FAIL", f"no lock for Python {minor} on {platform.machine()}: {lock.name}"
    t0 = time.monotonic()
    try:
        wheel = _venvs.build_wheel(exe, work / "wheels")
        py = _venvs.fresh_venv(exe, work / f"venv-{minor}")
        _venvs.pip_install(py, "--require-hashes", "-r", str(lock))
        _venvs.pip_install(py, "--no-deps", str(wheel))
        _venvs.run([str(py), "-c", NO_TORCH])
    except RuntimeError as exc:
        return "FAIL", str(exc)
    setup = time.monotonic() - t0
    res = subprocess.run(
        [str(py), str(BOARD_SMOKE), "--models", str(_venvs.REPO / "models")],
        capture_output=True,
        text=True,
        cwd=work,
    )
    detail = f"{wheel.name}; install {setup:.0f} s, run {time.monotonic() - t0 - setup:.0f} s\n"
    detail += (res.stdout + (res.stderr[-3000:] if res.returncode else "")).rstrip()
    return ("PASS" if res.returncode == 0 else "FAIL"), detail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pythons",
        default=",".join(_venvs.BOARD_PYTHONS),
        help="comma-separated minors (default: the boards' Pythons)",
    )
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cdml-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    failed = 0
    try:
        for minor in args.pythons.split(","):
            board = _venvs.BOARD_PYTHONS.get(minor, "")
            status, detail = check_python(minor, work)
            failed += status == "FAIL"
            print(f"python {minor} ({board}): {status}: {detail}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
