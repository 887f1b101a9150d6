"""install.sh reads the unit's ``EnvironmentFile=`` as systemd does (the doctor's parser).

The installer resolves the configuration's ``${VAR}``s to create the source folders and list
them in the ``ReadWritePaths=`` drop-in. It used to read ``/etc/cdml-edge/environment`` with
a parser of its own, simpler than systemd's: a line it read differently made it create and
open up other folders than those the service then uses (or call a valid configuration
invalid). A staged install (no root, no pip: a complete release is there already, its venv's
Python is this one) on a site file where the two used to disagree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT

from cdml_edge import __version__
from cdml_edge.doctor.unit_env import parse_environment

SCRIPT = ROOT / "scripts" / "release" / "install.sh"

# What systemd gives the service for each line, not what a naive KEY=VALUE reader takes:
# blanks around the key, a continued line, trailing blanks, escapes in double quotes.
SITE = (
    "# the site's values\n"
    "  LINE3 = {base}/line3   \n"
    "PRESS={base}/pre\\\n"
    "ss\n"
    'ROBOT="{base}/robot \\"7\\""\n'
    "export LINE3={base}/wrong\n"  # not a variable name: systemd skips it
    "WELD='{base}/weld'\"s\"   \n"
)


def _stub(folder: Path, name: str, calls: Path) -> None:
    stub = folder / name
    stub.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "systemd 252"; exit 0; fi\n'
        f'echo "{name} $*" >> "{calls}"\n'
    )
    stub.chmod(0o755)


def _staged(tmp_path: Path) -> tuple[dict[str, str], Path, Path, Path]:
    """A board with release ``__version__`` installed already: env, etc, units, data."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("systemctl", "useradd", "usermod"):
        _stub(bin_dir, name, calls)
    root = tmp_path / "root"
    prefix, etc = root / "opt/cdml-edge", root / "etc/cdml-edge"
    venv = prefix / "releases" / __version__ / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "cdml-edge-release.json").write_text(f'{{"release": "{__version__}"}}\n')
    python = venv / "bin" / "python"  # this checkout's cdml_edge as the release's (-I: no path)
    python.write_text(
        f'#!/bin/sh\n[ "$1" = -I ] && shift\nPYTHONPATH="{ROOT}" exec "{sys.executable}" "$@"\n'
    )
    python.chmod(0o755)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        CDML_UNPRIVILEGED="1",
        CDML_PREFIX=str(prefix),
        CDML_ETC=str(etc),
        CDML_STATE=str(root / "var/lib/cdml-edge"),
        CDML_DATA=str(root / "srv/cdml"),
        CDML_UNIT_DIR=str(units),
        SYSTEMCTL=str(bin_dir / "systemctl"),
        PYTHON=sys.executable,
    )
    return env, etc, units, root / "srv/cdml"


def _config(tmp_path: Path) -> Path:
    sources = [
        {"name": n.lower(), "path": f"${{{n}}}/in", "modality": "text", "on_done": "delete"}
        for n in ("LINE3", "PRESS", "ROBOT", "WELD")
    ]
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(yaml.safe_dump({"sources": sources}))
    return cfg


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_install_reads_the_environment_file_as_systemd_does(tmp_path: Path) -> None:
    base = tmp_path / "site"
    text = SITE.format(base=base)
    want = parse_environment(text, comment_continues=True).values  # systemd 252's reading
    assert want == {
        "LINE3": f"{base}/line3",
        "PRESS": f"{base}/press",
        "ROBOT": f'{base}/robot "7"',
        "WELD": f"{base}/welds",
    }
    env, etc, units, _ = _staged(tmp_path)
    etc.mkdir(parents=True)
    (etc / "environment").write_text(text)
    res = subprocess.run(
        ["bash", str(SCRIPT), "--no-apt", "--no-start", "--board", "pi", "--memory-max", "1G"]
        + ["--config", str(_config(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    dropin = (units / "cdml-edge.service.d/60-paths.conf").read_text()
    for value in want.values():
        folder = Path(value) / "in"
        assert folder.is_dir(), f"{folder} not made; made: {sorted(map(str, base.rglob('*')))}"
        assert f"-{folder}" in dropin.replace('\\"', '"'), dropin
    made = sorted(str(p.relative_to(base)) for p in base.iterdir())
    assert made == ["line3", "press", 'robot "7"', "welds"], made
