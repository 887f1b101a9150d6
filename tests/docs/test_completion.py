"""Shell completion (typer's own): bash, zsh and fish, and ``--install-completion``.

The script bash sources completes commands and options, ``--install-completion`` installs it,
and zsh / fish get answers through the same protocol.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = shutil.which("cdml-edge", path=str(Path(sys.executable).parent))
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="completion is run by bash")


def _env(home: Path) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return {**os.environ, "HOME": str(home), "PATH": path, "SHELL": str(BASH)}


def _bash(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run(
        [BASH, "-c", script], capture_output=True, text=True, timeout=60, env=_env(home)
    )


def test_bash_completes_commands_and_options_from_the_shown_script(tmp_path: Path) -> None:
    script = (
        'eval "$(cdml-edge --show-completion)"\n'
        "complete -p cdml-edge\n"
        "COMP_WORDS=(cdml-edge re); COMP_CWORD=1; _cdml_edge_completion cdml-edge; "
        'echo "words: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(cdml-edge run --con); COMP_CWORD=2; _cdml_edge_completion cdml-edge; "
        'echo "options: ${COMPREPLY[*]}"\n'
    )
    res = _bash(script, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "complete -o default -F _cdml_edge_completion cdml-edge" in res.stdout
    words = next(ln for ln in res.stdout.splitlines() if ln.startswith("words:")).split()[1:]
    assert set(words) == {"replay"}
    assert "options: --config" in res.stdout


def test_install_completion_writes_the_script_and_sources_it(tmp_path: Path) -> None:
    # bash stays the parent (a lone command would be exec'ed): typer detects the shell from
    # the process tree, and above this test there may be only make's sh
    res = _bash("cdml-edge --install-completion; exit $?", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    installed = tmp_path / ".bash_completions" / "cdml-edge.sh"
    assert "_cdml_edge_completion" in installed.read_text()
    assert str(installed.name) in (tmp_path / ".bashrc").read_text()
    again = _bash(f"source {installed}; complete -p cdml-edge", tmp_path)
    assert "_cdml_edge_completion" in again.stdout


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_completions(shell: str, tmp_path: Path) -> None:
    assert EXE is not None
    env = {
        **_env(tmp_path),
        "_CDML_EDGE_COMPLETE": f"complete_{shell}",
        "_TYPER_COMPLETE_ARGS": "cdml-edge ex",
        "_TYPER_COMPLETE_FISH_ACTION": "get-args",
    }
    res = subprocess.run([EXE], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert "export" in res.stdout and "export-onnx" in res.stdout and "replay" not in res.stdout
