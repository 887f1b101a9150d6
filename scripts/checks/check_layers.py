"""The layer contract of ``cdml_edge``: each package imports only the layers below it.

Run by ``make lint`` and by ``tests/test_layers.py``. Every import counts, also those inside
functions (a lazy import still couples two layers); ``if TYPE_CHECKING:`` blocks are skipped.
Three rules:

1. a module imports only modules of its own package or of a lower layer;
2. no import cycle between modules anywhere in the package;
3. torch is imported only by ``data/`` and ``nn/`` (the appliance runs without it).

Exit status 0 when the contract holds, 1 with one line per breach otherwise.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "cdml_edge"

# Top to bottom. A name is a top-level module or package of cdml_edge; names on one line are
# peers and must not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("entry",),
    ("cli",),
    ("commands",),
    # the users of the components below; as peers none of them reaches into another (so
    # nothing beside agent/ imports it)
    ("agent", "doctor", "retrain", "nn", "live", "tail"),
    ("data", "health"),
    ("intake", "outputs"),
    ("store",),
    ("window",),
    ("model", "decode", "archive", "synth"),
    ("config", "charts"),
    ("supervisor",),
    ("modality", "units", "errors", "fsio", "release", "backoff", "optional"),
]
TORCH_ALLOWED = ("data", "nn")
TORCH_NAMES = ("torch", "torchvision", "torchaudio")


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for sub in child.orelse:
                yield sub
                yield from _walk(sub)
            continue
        yield child
        yield from _walk(child)


def imports_of(path: Path, modules: set[str], root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for each import in ``path``; ``from pkg import sub`` names ``pkg.sub``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if sub in modules else target


def layer_of(module: str) -> tuple[int, str] | None:
    parts = module.split(".")
    if parts[0] != "cdml_edge" or len(parts) < 2:
        return None
    top = parts[1]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i, top
    return None


def check(root: Path = ROOT) -> list[str]:
    """Every breach of the contract, one line each (empty when it holds)."""
    files = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in files}
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in files:
        name = module_name(path, root)
        where = path.relative_to(root.parent)
        mine = layer_of(name)
        if name != "cdml_edge" and mine is None:
            problems.append(f"{where}: cdml_edge.{name.split('.')[1]} is in no layer")
            continue
        for line, target in imports_of(path, modules, root):
            top = target.split(".")[0]
            if top in TORCH_NAMES and (mine is None or mine[1] not in TORCH_ALLOWED):
                problems.append(f"{where}:{line}: imports {target} (torch only in data/, nn/)")
            theirs = layer_of(target)
            if theirs is None or mine is None:
                continue
            if target in modules and target != name:
                graph[name].add(target)
            if theirs[1] == mine[1]:
                continue
            if theirs[0] <= mine[0]:
                kind = "a peer" if theirs[0] == mine[0] else "a higher layer"
                problems.append(f"{where}:{line}: {mine[1]} imports {target} ({kind}: {theirs[1]})")
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(_a_cycle(graph, set(comp)))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _a_cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    start = min(comp)
    path, seen, node = [start], {start}, start
    while True:
        nxt = min(w for w in graph[node] if w in comp)
        if nxt in seen:
            return path[path.index(nxt) :] + [nxt]
        path.append(nxt)
        seen.add(nxt)
        node = nxt


def main() -> int:
    problems = check()
    for p in problems:
        print(p)
    if problems:
        print(f"layer contract: {len(problems)} problem(s)")
        return 1
    print("layer contract holds: " + " > ".join("/".join(names) for names in LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
