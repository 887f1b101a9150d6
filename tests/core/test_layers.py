"""The house rules of the package: the layer contract and function length (scripts/checks/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from helpers.paths import ROOT

SCRIPTS = ROOT / "scripts" / "checks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_layer_contract_holds() -> None:
    assert _load("check_layers").check() == []


def test_layer_checker_finds_an_upward_import_a_cycle_and_torch(tmp_path: Path) -> None:
    checker = _load("check_layers")
    pkg = tmp_path / "cdml_edge"
    for sub in ("archive", "agent", "config"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "archive" / "a.py").write_text("def f():\n    from cdml_edge.agent import b\n")
    (pkg / "agent" / "b.py").write_text("import torch\nfrom cdml_edge.archive import a\n")
    (pkg / "config" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cdml_edge.agent import b\n"
    )
    problems = checker.check(pkg)
    assert any("archive imports cdml_edge.agent.b (a higher layer" in p for p in problems)
    assert any("imports torch" in p for p in problems)
    assert any(p.startswith("import cycle:") for p in problems)
    assert not any("config/c.py" in p for p in problems)  # TYPE_CHECKING imports are free


def test_no_long_function_without_a_reason() -> None:
    assert _load("check_function_length").long_functions() == []


def test_length_rule_accepts_a_stated_reason(tmp_path: Path) -> None:
    rule = _load("check_function_length")
    body = "\n".join(f"    x{i} = {i}" for i in range(70))
    (tmp_path / "m.py").write_text(
        f'def long():\n{body}\n\ndef reasoned():\n    """Long: one state machine."""\n{body}\n'
    )
    found = rule.long_functions(tmp_path)
    assert len(found) == 1 and "long is" in found[0]
