"""The documentation the tests hold to the code: README.md and the pages of docs/, and their blocks.

A fenced block may follow a marker line: ``<!-- runnable[: SETUP] -->`` (the tests run it)
or ``<!-- shown: why -->`` (it is shown, not run, for the reason given).
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_files() -> list[Path]:
    """README.md, then every docs/ page in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page(name: str) -> Path:
    """One docs/ page by name (``cli`` -> ``docs/cli.md``)."""
    return DOCS / f"{name}.md"


def cli_env() -> dict[str, str]:
    """The environment of a documented command: this checkout's ``cdml-edge`` first.

    This interpreter's scripts first on the ``PATH``, this checkout first on ``PYTHONPATH``.
    """
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PATH": path, "PYTHONPATH": python_path}


def where(path: Path) -> str:
    """A page's name as a message shows it (``docs/cli.md``)."""
    return str(path.relative_to(ROOT))


MARKER = re.compile(r"^(\s*)<!-- (runnable(?:: ([\w-]+))?|shown: [^>]+) -->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # README.md or docs/<page>.md
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "runnable", "shown: ...", or None
    setup: str | None


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in doc_files():
        blocks += page_blocks(where(path), path.read_text(encoding="utf-8").splitlines())
    return blocks


def page_blocks(page: str, lines: list[str]) -> list[Block]:
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence or not fence.group(2):
            i += 1
            continue
        indent, lang, start = fence.group(1), fence.group(2), i
        i += 1
        while not re.match(rf"^{indent}```\s*$", lines[i]):
            i += 1
        code = textwrap.dedent("\n".join(lines[start + 1 : i])) + "\n"
        prev = MARKER.match(lines[start - 1]) if start else None
        marker = prev.group(2) if prev else None
        setup = prev.group(3) if prev else None
        blocks.append(Block(page, start + 1, lang, code, marker, setup))
        i += 1
    return blocks
