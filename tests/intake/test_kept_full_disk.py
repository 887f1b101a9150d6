"""A keep folder while the state folder's disk is full: the kept-file record cannot be written.

The record (``<state_dir>/kept/<source>.sqlite``) is written when a file is kept and when a
kept file goes. On a full disk SQLite says ``database or disk is full``; that must not fail
the window (it was scored and its results are out: failing it scored the file again and
again while the disk stayed full), nor report a kept file deleted meanwhile as a fault. The
real agent on a real full tmpfs (skipped where mounting is refused).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic
from helpers.full_disk import fill
from helpers.kept_runs import keep_config, results_of, small_state, windows_done

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.intake.kept import RETRY_S


def _drop(agent: Agent, cam: Path, name: str, out: Path) -> None:
    write_atomic(cam / name, jpeg(100 + len(name)))
    wait_for(lambda: results_of(out, name) >= 1, what=f"{name}'s result")


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield from small_state(tmp_path)


def test_a_full_state_disk_neither_fails_nor_rescores_kept_files(
    tmp_path: Path, state: Path, models: Path
) -> None:
    cfg_path = keep_config(tmp_path, state)
    cam, out = tmp_path / "in/cam", tmp_path / "out.jsonl"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        _drop(agent, cam, "a.jpg", out)
        wait_for(lambda: windows_done(agent) == 1, what="a.jpg's window done")
        fill(state)
        _drop(agent, cam, "b.jpg", out)
        wait_for(lambda: windows_done(agent) == 2, timeout=5, what="b.jpg's window done")
        (cam / "a.jpg").unlink()  # a kept file gone: its row cannot be deleted now
        _drop(agent, cam, "c.jpg", out)
        wait_for(lambda: windows_done(agent) == 3, timeout=5, what="c.jpg's window done")
        time.sleep(RETRY_S)  # a failed window was retried after 0.5 s; and the record is
        (state / "filler").unlink()  # written again once RETRY_S passed
        _drop(agent, cam, "d.jpg", out)  # the disk works again: the record catches up
        wait_for(lambda: windows_done(agent) == 4, timeout=5, what="d.jpg's window done")
    finally:
        agent.stop()
    lines = read_jsonl(out)
    assert not of_kind(lines, "cam/error"), of_kind(lines, "cam/error")
    assert [results_of(out, n) for n in ("a.jpg", "b.jpg", "c.jpg")] == [1, 1, 1]
    assert sorted(p.name for p in cam.iterdir()) == ["b.jpg", "c.jpg", "d.jpg"]
    assert not list((tmp_path / "quarantine").rglob("*.jpg"))

    # A restart: the files kept while the disk was full are in the record now.
    write_atomic(cam / "e.jpg", jpeg(7))
    later = time.time() + 5
    os.utime(cam / "e.jpg", (later, later))  # newest: taken after the kept ones, were they
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: results_of(out, "e.jpg") == 1, what="e.jpg's result")
    finally:
        agent.stop()
    assert [results_of(out, n) for n in ("b.jpg", "c.jpg", "d.jpg")] == [1, 1, 1]
    assert agent.sources["cam"].stats.taken == 1


def test_the_record_holds_changes_in_memory_while_its_disk_is_full(
    tmp_path: Path, state: Path
) -> None:
    """The record itself: nothing raises, nothing is lost, all is written once it can be."""
    from cdml_edge.intake.kept import KeptFiles
    from cdml_edge.window.items import FileIdentity

    files = tmp_path / "files"
    files.mkdir()
    idents = {}
    for name in ("a", "b", "c"):
        (files / name).write_bytes(name.encode())
        idents[name] = FileIdentity.of(os.stat(files / name))
    record = KeptFiles(state / "kept" / "cam.sqlite")
    record.put(str(files / "a"), idents["a"])
    fill(state)
    record.put(str(files / "b"), idents["b"])
    record.remove(str(files / "a"))
    (files / "c").unlink()
    record.put(str(files / "c"), idents["c"])  # gone meanwhile: forgotten by the prune
    assert record.get(str(files / "b")) == idents["b"] and record.get(str(files / "a")) is None
    assert len(record) == 2 and record.write_failures >= 1
    (files / "a").unlink()
    assert record.prune() == 0 and len(record) == 1  # c forgotten in memory, a's row stays
    (state / "filler").unlink()
    assert record.prune() == 1  # the disk works again: a's row goes
    record.put(str(files / "b"), idents["b"])  # a write that works: the held ones go with it
    record.close()
    again = KeptFiles(state / "kept" / "cam.sqlite")
    assert again.get(str(files / "b")) == idents["b"]
    assert again.get(str(files / "a")) is None and again.get(str(files / "c")) is None
    assert len(again) == 1
    again.close()


def test_a_record_opened_on_a_full_disk_is_kept_and_read(tmp_path: Path, state: Path) -> None:
    """A restart while the disk is full: the record is read, never deleted as if corrupt.

    Opening it needs its ``-shm`` file; on a full disk that fails with ``database or disk
    is full``, which was taken for an unreadable record: deleted and started afresh, so
    every kept file of the folder was scored once more.
    """
    from cdml_edge.intake.kept import KeptFiles
    from cdml_edge.window.items import FileIdentity

    path = state / "kept" / "cam.sqlite"
    record = KeptFiles(path)
    kept = {f"/in/still-{i}.jpg": FileIdentity(1, i, 10, 20) for i in range(50)}
    for name, ident in kept.items():
        record.put(name, ident)
    record.close()
    fill(state)
    record = KeptFiles(path)
    assert len(record) == 50 and all(record.get(n) == i for n, i in kept.items())
    record.put("/in/new.jpg", FileIdentity(1, 99, 10, 20))  # held in memory
    assert record.get("/in/new.jpg") == FileIdentity(1, 99, 10, 20)
    record.close()
    (state / "filler").unlink()
    record = KeptFiles(path)
    assert len(record) == 50 and all(record.get(n) == i for n, i in kept.items())
    record.close()


def test_a_record_opened_on_a_full_disk_is_written_once_there_is_room(
    tmp_path: Path, state: Path
) -> None:
    """Opened read-only on a full disk, the record is opened for writing once it has room.

    It stayed read-only for the whole run: every change was held in memory until a restart,
    and a keep folder of more files than the memory holds scored the oldest once more.
    """
    from cdml_edge.intake.kept import KeptFiles
    from cdml_edge.window.items import FileIdentity

    path = state / "kept" / "cam.sqlite"
    KeptFiles(path).close()
    fill(state)
    record = KeptFiles(path)
    record.put("/in/a.jpg", FileIdentity(1, 1, 10, 20))  # held: the disk is full
    (state / "filler").unlink()
    time.sleep(RETRY_S + 0.05)
    assert record.flush(), "the held change was not written once the disk had room"
    record.put("/in/b.jpg", FileIdentity(1, 2, 10, 20))
    record.close()
    again = KeptFiles(path)
    assert again.get("/in/a.jpg") == FileIdentity(1, 1, 10, 20)
    assert again.get("/in/b.jpg") == FileIdentity(1, 2, 10, 20)
    again.close()


def test_held_changes_past_the_bound_forget_files_before_they_forget_kept_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``MAX_UNSAVED`` held changes, a held "forget" goes before a held "kept".

    A kept file dropped from memory reads as not kept and is scored once more at the next
    full scan (a duplicate result); a forget dropped leaves a row of a file that is gone,
    which the next prune removes.
    """
    import sqlite3

    from cdml_edge.intake import kept as kept_mod
    from cdml_edge.window.items import FileIdentity

    monkeypatch.setattr(kept_mod, "MAX_UNSAVED", 3)
    record = kept_mod.KeptFiles(None)

    def full(self: object) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(kept_mod.KeptFiles, "_flush_locked", full)
    record._count = 1  # as if /in/old.jpg were in the record
    for i in range(2):
        record.put(f"/in/{i}.jpg", FileIdentity(1, i, 10, 20))
    record.remove("/in/old.jpg")  # its forget held after two kept files
    record.put("/in/2.jpg", FileIdentity(1, 2, 10, 20))
    assert [record.get(f"/in/{i}.jpg") is not None for i in range(3)] == [True] * 3
