"""A ``recursive`` source whose tree is deeper than the recursion limit keeps taking files.

watchdog's observers walk the tree recursively when they start (``os.walk`` for inotify's
watches, ``DirectorySnapshot`` for polling): a tree about 1,000 levels deep raised
``RecursionError`` in the source's thread, which died, and no file was taken. Now the source
falls back to rescanning the tree itself (an iterative walk) every ``poll_interval``, says so
in ``degraded``, and takes the files. The child lowers the recursion limit to keep the tree
small (``os.walk`` and the snapshot honour it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.agent_runs import wait_for

CHILD = Path(__file__).with_name("subfolder_watch.py")
LIMIT = 200  # the child's recursion limit
DEPTH = 300  # levels: deeper than the limit


def _lines(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    rows = out.read_text(encoding="utf-8").splitlines()
    return [json.loads(r) for r in rows if r.endswith("}")]


def _taken(out: Path) -> list[str]:
    return [r["name"] for r in _lines(out) if r["kind"] == "item"]


def _degraded(out: Path) -> str | None:
    rows = [r for r in _lines(out) if r["kind"] == "degraded"]
    return rows[-1]["why"] if rows else None


@pytest.mark.parametrize("watch", ["inotify", "polling"])
def test_a_tree_deeper_than_the_recursion_limit_is_rescanned(tmp_path: Path, watch: str) -> None:
    tree = tmp_path / "tree"
    deepest = tree
    for _ in range(DEPTH):
        deepest = deepest / "d"
    deepest.mkdir(parents=True)
    (deepest / "before.txt").write_text("before")
    out, log = tmp_path / "out.jsonl", tmp_path / "child.log"
    code = (
        "import runpy, sys; "
        f"sys.setrecursionlimit({LIMIT}); "
        f"sys.argv = [{str(CHILD)!r}, {str(tree)!r}, {str(out)!r}, {watch!r}]; "
        f"runpy.run_path({str(CHILD)!r}, run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=log.open("wb"), env=env)
    try:
        wait_for(lambda: any(r["kind"] == "started" for r in _lines(out)), what="started")
        rel = "/".join(["d"] * DEPTH)
        wait_for(lambda: f"{rel}/before.txt" in _taken(out), what="the file present at start")
        names = [f"f{i}.txt" for i in range(5)]
        for name in names:
            (deepest / name).write_text(name)
        (tree / "top.txt").write_text("top")
        want = {f"{rel}/{n}" for n in names} | {"top.txt"}
        wait_for(lambda: want <= set(_taken(out)), what="the files written after start")
        why = _degraded(out) or ""
        assert "too deep" in why, why
        taken = _taken(out)
        assert len(taken) == len(set(taken)) == 7, taken  # each once
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    assert said.count("too deep") == 1, said[-3000:]  # said once
