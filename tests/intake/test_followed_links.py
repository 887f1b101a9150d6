"""A followed link is finished as the docs say: ``on_done`` acts on the link, never its target.

A real agent on a real folder with real links (``follow_symlinks: true``): one link to a file
inside the folder, one into ``link_roots``. Each is scored once, across a restart too; with
``delete`` or ``move`` the link goes (a move keeps it a link, as written) and its target is
untouched; with ``keep`` both stay. Then the identity check on its own: the scored link is
finished only while it is still the same link to the same, unchanged target.
"""

from __future__ import annotations

import hashlib
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.intake.finishing import FileLifecycle, still_scored
from cdml_edge.intake.regular import (
    LinkedIdentity,
    LinkPolicy,
    identity_read,
    link_at,
    read_regular,
)
from cdml_edge.window.items import FileIdentity


def _config(tmp_path: Path, on_done: str) -> Path:
    move = ", move_to: done" if on_done == "move" else ""
    text = f"""
    device: {{id: test-dev}}
    sources:
      - {{name: cam, kind: folder, path: in/cam, modality: image, on_done: {on_done}{move},
         follow_symlinks: true, link_roots: [store], window: {{seconds: 50ms, max_items: 8}},
         stable_seconds: 0.2}}
    models:
      image: {{path: models/brightness.onnx}}
    quarantine: {{dir: quarantine}}
    health: {{interval: 0.2s}}
    output: {{jsonl: out.jsonl}}
    """
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(textwrap.dedent(text))
    return cfg


def _results(tmp_path: Path) -> list[dict[str, Any]]:
    return of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")


def _links(tmp_path: Path) -> dict[str, tuple[Path, bytes]]:
    """Two links in ``in/cam`` and their targets.

    ``inside.jpg`` -> ``sub/a.jpg`` (relative, in the folder; not watched: not recursive)
    and ``rooted.jpg`` -> ``store/b.jpg`` (absolute, in link_roots).
    """
    cam, store = tmp_path / "in/cam", tmp_path / "store"
    (cam / "sub").mkdir(parents=True)
    store.mkdir()
    targets = {
        "inside.jpg": (cam / "sub/a.jpg", jpeg(30)),
        "rooted.jpg": (store / "b.jpg", jpeg(220)),
    }
    for target, data in targets.values():
        target.write_bytes(data)
    os.symlink("sub/a.jpg", cam / "inside.jpg")
    os.symlink(store / "b.jpg", cam / "rooted.jpg")
    return targets


@pytest.mark.parametrize("on_done", ["delete", "move", "keep"])
def test_a_followed_link_is_finished_as_a_link_and_scored_once(
    tmp_path: Path, models: Path, on_done: str
) -> None:
    cfg_path = _config(tmp_path, on_done)
    cam = tmp_path / "in/cam"
    targets = _links(tmp_path)
    readlinks = {name: os.readlink(cam / name) for name in targets}
    seen: list[dict[str, Any]] = []
    for run in range(2):  # a restart: nothing scored again
        (tmp_path / "out.jsonl").unlink(missing_ok=True)
        agent = Agent(load_config(cfg_path), cfg_path)
        agent.start()
        try:
            if run == 0:
                wait_for(lambda: len(_results(tmp_path)) == 2, what="both links scored")
                if on_done != "keep":
                    wait_for(
                        lambda: not any(os.path.lexists(cam / n) for n in targets),
                        what=f"on_done {on_done} of both links",
                    )
            time.sleep(1.0)  # time for a second scoring, a rescan, a retry
            seen += _results(tmp_path)
            assert agent.lifecycle.changed == 0 and agent.lifecycle.failures == 0
        finally:
            agent.stop()
    assert sorted(r["item"] for r in seen) == sorted(targets)
    assert {r["item"]: r["label"] for r in seen} == {"inside.jpg": "dark", "rooted.jpg": "bright"}
    for target, data in targets.values():  # the targets untouched
        assert target.read_bytes() == data and not target.is_symlink()
    for name in targets:
        kept = cam / name
        moved = tmp_path / "done" / name
        assert kept.is_symlink() == (on_done == "keep")
        assert os.path.lexists(moved) == (on_done == "move")
        if on_done == "move":  # the link itself, as it was written
            assert moved.is_symlink() and os.readlink(moved) == readlinks[name]
    assert not list(cam.glob(".cdml-done-*"))


# -- the identity check of a link, on its own --------------------------------------------


def _read_link(link: Path, root: Path) -> tuple[FileIdentity, str]:
    """What the folder source remembers of a link it read: identity and content hash."""
    seen_ns, seen = time.time_ns(), link_at(str(link))
    data, st = read_regular(str(link), 1 << 20, LinkPolicy.of(True, root))
    return identity_read(st, seen_ns, seen), hashlib.sha256(data).hexdigest()


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "t.jpg"
    target.write_bytes(b"scored")
    link = tmp_path / "l.jpg"
    os.symlink("t.jpg", link)
    return link, target


def test_a_link_read_remembers_the_link_and_its_target(linked: tuple[Path, Path]) -> None:
    link, target = linked
    ident, _ = _read_link(link, link.parent)
    assert isinstance(ident, LinkedIdentity)
    assert ident.target == FileIdentity.of(os.stat(target))
    assert (ident.link_ino, ident.link_to) == (os.lstat(link).st_ino, "t.jpg")
    regular, _ = _read_link(target, link.parent)
    assert type(regular) is FileIdentity


def test_an_unchanged_link_is_deleted_not_its_target(
    tmp_path: Path, linked: tuple[Path, Path]
) -> None:
    link, target = linked
    ident, sha = _read_link(link, tmp_path)
    assert still_scored(link, ident, sha) is True
    lc = FileLifecycle(tmp_path / "quarantine", 10**6)
    lc.finish(link, "delete", identity=ident, sha256=sha)
    assert not os.path.lexists(link) and target.read_bytes() == b"scored"
    assert (lc.deleted, lc.changed) == (1, 0)


def _relinked(link: Path, target: Path) -> None:
    """Another link with the same text in its place (a new inode)."""
    os.symlink(os.readlink(link), link.with_name("new"))
    os.replace(link.with_name("new"), link)


def _retargeted(link: Path, target: Path) -> None:
    """The same name now a link to another file of the same size and mtime."""
    other = target.with_name("o.jpg")
    other.write_bytes(b"scored")
    st = os.stat(target)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.symlink("o.jpg", link.with_name("new"))
    os.replace(link.with_name("new"), link)


def _target_in_place(link: Path, target: Path) -> None:
    """The target itself renamed into the link's place: not the link any more."""
    os.replace(target, link)


def _target_rewritten(link: Path, target: Path) -> None:
    """The target rewritten in place, its size and mtime put back."""
    st = os.stat(target)
    target.write_bytes(b"newer!")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def _target_gone(link: Path, target: Path) -> None:
    target.unlink()


@pytest.mark.parametrize(
    "change", [_relinked, _retargeted, _target_in_place, _target_rewritten, _target_gone]
)
@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_link_changed_since_it_was_scored_is_left(
    tmp_path: Path, linked: tuple[Path, Path], change: Any, on_done: str
) -> None:
    link, target = linked
    ident, sha = _read_link(link, tmp_path)
    change(link, target)
    before = os.readlink(link) if link.is_symlink() else link.read_bytes()
    lc = FileLifecycle(tmp_path / "quarantine", 10**6)
    assert lc.finish(link, on_done, tmp_path / "done", identity=ident, sha256=sha) is None  # type: ignore[arg-type]
    assert os.path.lexists(link) and not (tmp_path / "done").exists()
    assert (os.readlink(link) if link.is_symlink() else link.read_bytes()) == before
    assert (lc.changed, lc.deleted, lc.moved) == (1, 0, 0)


def test_a_regular_file_scored_is_not_finished_as_a_link(tmp_path: Path) -> None:
    """A link put where a regular file was scored is not that file (as before)."""
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _read_link(p, tmp_path)
    p.rename(tmp_path / "t.jpg")
    os.symlink("t.jpg", p)
    assert still_scored(p, ident, sha) is False
