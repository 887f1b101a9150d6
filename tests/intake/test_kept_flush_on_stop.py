"""Kept-file changes held in memory (the record's disk was full) reach the disk by the stop.

While the state folder's disk is full the kept-file record holds its changes in memory. They
used to be written only with a later change: an agent stopped once the disk had room again,
but before another file was kept, lost them, and its restart scored those files once more.
The real agent on a real full tmpfs (skipped where mounting is refused), stopped and started.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for, write_atomic
from helpers.full_disk import fill
from helpers.kept_runs import keep_config, results_of, small_state, windows_done

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield from small_state(tmp_path)


def test_changes_held_while_the_disk_was_full_are_written_by_the_stop(
    tmp_path: Path, state: Path, models: Path
) -> None:
    cfg_path = keep_config(tmp_path, state)
    cam, out = tmp_path / "in/cam", tmp_path / "out.jsonl"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        write_atomic(cam / "a.jpg", jpeg(100))
        wait_for(lambda: windows_done(agent) == 1, what="a.jpg's window done")
        fill(state)
        write_atomic(cam / "b.jpg", jpeg(200))  # kept while the record cannot be written
        wait_for(lambda: windows_done(agent) == 2, what="b.jpg's window done")
        record = agent.sources["cam"].files._kept  # type: ignore[union-attr]
        assert record.write_failures >= 1, "the record was written: the disk was not full"
        (state / "filler").unlink()  # room again, and no other file kept before the stop
    finally:
        agent.stop()
    assert [results_of(out, n) for n in ("a.jpg", "b.jpg")] == [1, 1]

    write_atomic(cam / "c.jpg", jpeg(7))
    later = time.time() + 5
    os.utime(cam / "c.jpg", (later, later))  # newest: taken after the kept ones, were they
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(lambda: results_of(out, "c.jpg") == 1, what="c.jpg's result")
    finally:
        agent.stop()
    assert [results_of(out, n) for n in ("a.jpg", "b.jpg")] == [1, 1], "scored once more"
    assert agent.sources["cam"].stats.taken == 1


def test_the_record_writes_what_it_held_once_there_is_room_and_after_its_close(
    tmp_path: Path, state: Path
) -> None:
    """Without another change: by :meth:`flush` (the source's thread) or by the close."""
    from cdml_edge.intake.kept import RETRY_S, KeptFiles
    from cdml_edge.window.items import FileIdentity

    files = tmp_path / "files"
    files.mkdir()
    idents = {}
    for name in ("a", "b", "c"):
        (files / name).write_bytes(name.encode())
        idents[name] = FileIdentity.of(os.stat(files / name))
    where = state / "kept" / "cam.sqlite"
    record = KeptFiles(where)
    record.put(str(files / "a"), idents["a"])  # the record made before the disk fills
    fill(state)
    record.put(str(files / "b"), idents["b"])
    assert record.write_failures == 1 and not record.flush()  # held, the disk still full
    (state / "filler").unlink()
    wait_for(record.flush, timeout=RETRY_S * 5, what="the held change written")
    assert KeptFiles(where).get(str(files / "b")) == idents["b"]

    record.close()
    record.put(str(files / "c"), idents["c"])  # a window finished after its source stopped
    assert record.get(str(files / "c")) == idents["c"]
    record.close()
    again = KeptFiles(where)
    assert [again.get(str(files / n)) for n in "abc"] == [idents[n] for n in "abc"]
    again.close()
