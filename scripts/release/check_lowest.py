"""The lower bounds of pyproject.toml, tested: lowest versions, lowest Python, no torch.

The runtime resolved with the lowest direct versions allowed (``uv pip compile --resolution
lowest-direct``) on the lowest supported Python, the wheel installed into a fresh venv
without torch, and the appliance tests run.

    python scripts/release/check_lowest.py [--python 3.10] [--keep DIR] [pytest args...]

Exit 0 when the tests pass; the resolved pins are printed first (``--show`` only prints them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _venvs
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# The appliance's own tests: sources, windows, the pipeline, archives, decoders, outputs. Found
# by file name anywhere below tests/ (appliance_tests), so a move into subfolders keeps them.
APPLIANCE_TESTS = [  # below tests/
    "intake/test_sources.py",
    "health/test_watchdog.py",
    "window/test_score.py",
    "agent/test_app.py",
    "intake/test_windower.py",
    "archive/test_zip.py",
    "archive/test_tarzst.py",
    "decode/test_decoders.py",
    "outputs/test_mqtt_publish.py",
    "health/test_metrics.py",
    "outputs/test_spool.py",
    "config/test_config.py",
]


def appliance_tests(tests: Path = _venvs.REPO / "tests") -> list[Path]:
    """The files of APPLIANCE_TESTS below ``tests``; one that is missing stops the check."""
    missing = [name for name in APPLIANCE_TESTS if not (tests / name).is_file()]
    if missing:
        raise SystemExit(f"not found below {tests}: {', '.join(missing)}")
    return [tests / name for name in APPLIANCE_TESTS]


def lowest_pins(python: str, out: Path) -> Path:
    """Compile the runtime dependencies at their lowest direct versions for ``python``."""
    pins = out / "lowest.txt"
    _venvs.run(
        [
            *_venvs.uv(),
            "pip",
            "compile",
            "--quiet",
            "--resolution",
            "lowest-direct",
            "--python",
            python,
            "--no-header",
            "-o",
            str(pins),
            str(_venvs.REPO / "pyproject.toml"),
        ]
    )
    return pins


def direct_pins(pins: Path) -> list[str]:
    """The pins of the dependencies pyproject.toml declares."""
    with open(_venvs.REPO / "pyproject.toml", "rb") as fh:
        declared = {
            canonicalize_name(Requirement(d).name)
            for d in tomllib.load(fh)["project"]["dependencies"]
        }
    pinned = [ln.split(";")[0].strip() for ln in pins.read_text().splitlines() if "==" in ln]
    return [p for p in pinned if canonicalize_name(p.split("==")[0]) in declared]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="3.10", help="the Python (minor) to test on")
    ap.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    ap.add_argument("--show", action="store_true", help="print the lowest pins and stop")
    args, pytest_args = ap.parse_known_args()
    tests = appliance_tests()  # before minutes of building: a missing test fails at once
    exe, why = _venvs.find_python(args.python)
    if exe is None:
        print(f"lowest-direct: SKIPPED: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="cdml-lowest-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        pins = lowest_pins(exe, work)
        print(f"lowest direct versions on Python {args.python}: " + " ".join(direct_pins(pins)))
        if args.show:
            return 0
        wheel = _venvs.build_wheel(exe, work / "wheels")
        py = _venvs.fresh_venv(exe, work / "venv")
        _venvs.pip_install(py, "-r", str(pins), *_venvs.TEST_TOOLS)
        _venvs.pip_install(py, "--no-deps", str(wheel))
        print(f"venv ready in {time.monotonic() - t0:.0f} s")
        # run outside the checkout, so that neither pytest nor a test's `python -c` imports
        # the checkout's cdml_edge in place of the installed wheel
        repo = _venvs.REPO
        cmd = [
            str(py.parent / "pytest"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            "-c",
            str(repo / "pyproject.toml"),
            "--rootdir",
            str(repo),
            f"--basetemp={work / 'pytest'}",
            *map(str, tests),
            *pytest_args,
        ]
        return subprocess.call(cmd, cwd=work)


if __name__ == "__main__":
    sys.exit(main())
