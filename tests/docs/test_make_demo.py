"""``make demo`` installs the appliance alone, and the demo needs nothing more.

The demo target's install recipe is the core install (no extras, no PyTorch), and the
demo's scripts and the agent they run import none of the heavy extras' packages.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers.docs_pages import ROOT, cli_env

HEAVY = (
    "torch",
    "ray",
    "boto3",
    "sklearn",
    "onnx",
    "matplotlib",
    "pyarrow",
    "pandas",
    "librosa",
    "PIL",
)


def _rule(makefile: str, target: str) -> tuple[list[str], list[str]]:
    """Prerequisites and recipe lines of ``target``."""
    m = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, re.M)
    assert m, target
    return m.group(1).split(), [ln.strip() for ln in m.group(2).splitlines()]


def test_make_demo_installs_no_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    stamps, _ = _rule(makefile, "demo")
    assert len(stamps) == 1
    stamp = stamps[0].strip("$()")
    _, recipe = _rule(makefile, f"$({stamp})")
    installs = [ln for ln in recipe if "install" in ln and "-e" in ln]
    assert installs == ["$(PIP) install -q -e ."], recipe
    assert not any("$(TORCH)" in ln for ln in recipe)
    _, dev = _rule(makefile, "$(STAMP)")
    assert "$(PIP) install -q -e '.[train,s3,ray,dev]'" in dev  # make test / install-dev
    assert _rule(makefile, "install-dev")[0] == ["$(STAMP)"]


def test_the_demo_imports_no_extra(tmp_path: Path) -> None:
    """The demo data, the demo runner and the agent, with the extras' packages unimportable."""
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in HEAVY)
    code = (
        f"import runpy, sys; {block}; "
        "import cdml_edge.cli, cdml_edge.agent.app, cdml_edge.outputs.mqtt.embedded_broker; "
        "sys.path.insert(0, 'scripts/demo'); import demo_run; "
        f"sys.argv = ['make_demo_data.py', '--out', {str(tmp_path / 'demo')!r}]; "
        "runpy.run_path('scripts/demo/make_demo_data.py', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo" / "truth.json").is_file()  # the staged inputs and their truth
