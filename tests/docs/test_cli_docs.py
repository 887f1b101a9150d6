"""The command table of docs/cli.md and the CLI agree."""

from __future__ import annotations

import re

import typer.main
from helpers.docs_pages import page

from cdml_edge.cli import app


def _cli_commands() -> set[str]:
    group = typer.main.get_command(app)
    names = set()
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        if sub:
            names.update(f"{name} {s}" for s in sub)
        else:
            names.add(name)
    return names


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    block = page("cli").read_text(encoding="utf-8")
    documented = set()
    for line in block.splitlines():
        match = re.match(r"^\| `cdml-edge ([a-z-]+(?: [a-z-]+)?)", line)
        if match and not match.group(1).startswith("--"):
            words = match.group(1).split()
            documented.add(" ".join(words) if words[0] == "config" else words[0])
    assert documented == _cli_commands()
