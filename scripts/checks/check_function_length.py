"""House rule: no function in ``cdml_edge`` longer than ``LIMIT`` lines without a reason.

A longer function states why in its docstring, on a line starting with ``Long:`` (a state
machine that reads best in one piece, say). Run by ``make lint`` and ``tests/test_layers.py``;
exit 1 with one line per offender.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "cdml_edge"
LIMIT = 60


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    """``path:line: name is N lines`` for each function over ``limit`` without a reason."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if length > limit and not any(
                line.strip().startswith("Long:") for line in doc.splitlines()
            ):
                where = path.relative_to(root.parent)
                out.append(f"{where}:{node.lineno}: {node.name} is {length} lines (> {limit})")
    return out


def main() -> int:
    found = long_functions()
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} function(s) over {LIMIT} lines without a 'Long:' reason")
        return 1
    print(f"no function over {LIMIT} lines without a reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
