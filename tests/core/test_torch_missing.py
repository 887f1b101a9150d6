"""A torch name imported where PyTorch is missing says what to install.

Before, ``from cdml_edge import CDMLStreamDataset`` right after ``make demo`` (the
appliance's venv, no torch) failed with a bare ``No module named 'torch'`` from deep in
the package; the command line already said ``pip install 'cdml-edge[train]'``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"


@pytest.mark.parametrize("name", ["CDMLStreamDataset", "CDMLTrainTier2"])
def test_a_torch_name_without_torch_names_the_extra(name: str) -> None:
    code = HIDE_TORCH + f"from cdml_edge import {name}\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: cdml_edge.") and name in last, last
    assert "pip install 'cdml-edge[train]'" in last


def test_the_appliance_names_still_import_without_torch() -> None:
    code = HIDE_TORCH + "from cdml_edge import open_archive, watch_in_memory, load_config\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
