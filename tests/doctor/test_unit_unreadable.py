"""A ``--unit`` the doctor cannot read is a failed check naming it, never a traceback.

Before, a mistyped path, a folder or a file that is not UTF-8 given as ``--unit`` ended
``cdml-edge doctor`` with a Python traceback (FileNotFoundError, IsADirectoryError,
UnicodeDecodeError) and none of the other checks ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

from cdml_edge.doctor import diagnose

CONFIG = """\
device: {id: edge-1}
state_dir: state
sources:
  - {name: cam1, kind: folder, path: in, modality: image}
models:
  image: {path: MODELS/digits.onnx}
"""


def _unit(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "no-such.service"
    if kind == "folder":
        (tmp_path / "a-folder.service").mkdir()
        return tmp_path / "a-folder.service"
    path = tmp_path / "latin1.service"
    path.write_bytes(b"[Service]\nReadWritePaths=/var/lib/caf\xe9\n")
    return path


@pytest.mark.parametrize("kind", ["missing", "folder", "not-utf8"])
def test_an_unreadable_unit_is_a_failed_check_and_the_rest_still_runs(
    tmp_path: Path, kind: str
) -> None:
    config = tmp_path / "factory.yaml"
    config.write_text(CONFIG.replace("MODELS", str(ROOT / "models")))
    (tmp_path / "in").mkdir()
    unit = _unit(tmp_path, kind)
    report = diagnose(config, timeout_s=1.0, unit=unit)
    by_name = {c.name: c for c in report.checks}
    assert "unit" in by_name, [c.name for c in report.checks]
    assert not by_name["unit"].ok
    assert str(unit) in by_name["unit"].detail
    assert by_name["config"].ok  # the other checks ran
    proc = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "doctor", "-c", str(config), "--unit", str(unit)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert str(unit) in proc.stdout
