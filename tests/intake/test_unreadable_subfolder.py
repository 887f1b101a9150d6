"""A ``recursive`` source's subfolder it cannot read is a state with events, never silence.

The top folder turning unreadable was a state (event, ``degraded``, a rescan once readable);
a subfolder that could not be listed (``chmod 000``), or whose watch could not be added (made
with mode 0), was skipped silently and its files never taken. Now it is reported once (an
event naming it, counted under ``subfolder_unreadable``), shown in ``degraded``, checked again
every second, and its end is an event of its own: the tree is watched again and rescanned.
The source runs in its own process without root's permission overrides (as
``test_unreadable_folder`` does), on watchdog's inotify observer and on the polling one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agent_runs import wait_for
from unprivileged import unprivileged

CHILD = Path(__file__).with_name("subfolder_watch.py")


class Watch:
    """The source's process and what it wrote."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def lines(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        rows = self.out.read_text(encoding="utf-8").splitlines()
        return [json.loads(r) for r in rows if r.endswith("}")]

    def taken(self) -> dict[str, str]:
        return {r["name"]: r["data"] for r in self.lines() if r["kind"] == "item"}

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        rows = [r for r in self.lines() if r["kind"] == "event"]
        return [r for r in rows if type_ is None or r["type"] == type_]

    def degraded(self) -> str | None:
        rows = [r for r in self.lines() if r["kind"] == "degraded"]
        return rows[-1]["why"] if rows else None


@pytest.fixture(params=["inotify", "polling"])
def watch(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Watch]]:
    """The ``tree`` folder (made, with what ``request.node`` put there first) and its watch."""
    if os.geteuid() != 0:
        pytest.skip("writes into folders the source may not read: needs root (and setpriv)")
    prefix = unprivileged(tmp_path)
    if prefix is None:
        pytest.skip("needs setpriv to drop root's permission overrides")
    os.chmod(tmp_path, 0o755)
    tree = tmp_path / "tree"
    tree.mkdir()
    setup = getattr(request.node.function, "setup", None)
    if setup is not None:
        setup(tree)
    w = Watch(tmp_path / "out.jsonl")
    proc = subprocess.Popen(
        [*prefix, sys.executable, str(CHILD), str(tree), str(w.out), request.param],
        stderr=(tmp_path / "child.log").open("wb"),
    )
    try:
        wait_for(lambda: any(r["kind"] == "started" for r in w.lines()), what="started")
        yield tree, w
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        for sub in tree.iterdir():
            sub.chmod(0o755)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = (tmp_path / "child.log").read_text()
    assert "Traceback" not in said, said[-3000:]


def _reported(w: Watch, name: str) -> None:
    """``name`` was reported unreadable, once, and is shown in ``degraded``."""
    wait_for(
        lambda: [e["item"] for e in w.events("SubfolderUnreadable")].count(name) == 1,
        what=f"{name}'s unreadable event",
    )
    [ev] = [e for e in w.events("SubfolderUnreadable") if e["item"] == name]
    assert "cannot be read (Permission denied)" in ev["message"], ev
    wait_for(lambda: name in (w.degraded() or ""), what=f"{name} in degraded")


def _readable_again(w: Watch, name: str) -> None:
    wait_for(
        lambda: [e["item"] for e in w.events("FolderReadable")].count(name) == 1,
        what=f"{name}'s readable-again event",
    )


def test_a_subfolder_made_unreadable_is_reported_and_its_files_taken_once_readable(
    watch: tuple[Path, Watch],
) -> None:
    tree, w = watch
    sub = tree / "sub"
    sub.mkdir()
    (sub / "a.txt").write_text("a")
    wait_for(lambda: "sub/a.txt" in w.taken(), what="sub/a.txt taken")

    sub.chmod(0)
    (sub / "b.txt").write_text("b")  # the test may (root): the source may not
    _reported(w, "sub")
    (tree / "top.txt").write_text("top")  # the rest of the tree goes on
    wait_for(lambda: "top.txt" in w.taken(), what="top.txt taken")

    sub.chmod(0o755)
    wait_for(lambda: w.taken().get("sub/b.txt") == "b", what="sub/b.txt taken once readable")
    _readable_again(w, "sub")
    wait_for(lambda: w.degraded() is None, what="degraded cleared")
    assert len(w.events("SubfolderUnreadable")) == 1
    assert len(w.events()) == 2, w.events()


def _locked_at_start(tree: Path) -> None:
    (tree / "locked").mkdir()
    (tree / "locked/c.txt").write_text("c")
    (tree / "locked").chmod(0)


def test_a_subfolder_unreadable_at_start_or_made_so_is_watched_once_readable(
    watch: tuple[Path, Watch],
) -> None:
    tree, w = watch
    _reported(w, "locked")  # at start: the scan could not list it, its watch not added
    new = tree / "new"
    new.mkdir(mode=0)  # made unreadable: its watch cannot be added
    _reported(w, "new")
    (new / "d.txt").write_text("d")
    (tree / "locked/c2.txt").write_text("c2")

    (tree / "locked").chmod(0o755)
    new.chmod(0o755)
    want = {"locked/c.txt": "c", "locked/c2.txt": "c2", "new/d.txt": "d"}
    wait_for(lambda: want.items() <= w.taken().items(), what="the three files taken")
    _readable_again(w, "locked")
    _readable_again(w, "new")
    wait_for(lambda: w.degraded() is None, what="degraded cleared")
    (new / "e.txt").write_text("e")  # watched now: taken on its events
    wait_for(lambda: w.taken().get("new/e.txt") == "e", what="new/e.txt taken")
    assert len(w.events()) == 4, w.events()


test_a_subfolder_unreadable_at_start_or_made_so_is_watched_once_readable.setup = (  # type: ignore[attr-defined]
    _locked_at_start
)


def test_a_subfolder_unreadable_for_a_moment_loses_no_file(watch: tuple[Path, Watch]) -> None:
    """Files announced while their folder could not be searched are noticed again after.

    The subfolder is readable again before the source looks at it: no state begins (no
    event), and the paths denied meanwhile are looked up again, so each file is taken.
    """
    tree, w = watch
    sub = tree / "sub"
    sub.mkdir()
    (sub / "first.txt").write_text("first")
    wait_for(lambda: "sub/first.txt" in w.taken(), what="sub/first.txt taken")
    names = [f"f{i}.txt" for i in range(10)]
    for name in names:
        sub.chmod(0)
        (sub / name).write_text(name)  # the test may (root): the source may not
        time.sleep(0.01)  # its events come meanwhile: the source cannot look it up
        sub.chmod(0o755)
        time.sleep(0.3)  # one flap at a time (each file is asserted, not the timing)
    wait_for(
        lambda: all(f"sub/{n}" in w.taken() for n in names),
        timeout=60,
        what=f"all 10 files taken (have {sorted(w.taken())})",
    )
    assert {n: w.taken()[f"sub/{n}"] for n in names} == {n: n for n in names}
    taken = [r["name"] for r in w.lines() if r["kind"] == "item"]
    assert len(taken) == len(set(taken)), taken  # each once
