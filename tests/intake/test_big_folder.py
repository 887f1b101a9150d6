"""Big kept folders: nothing scored twice, new files on time, intake linear in the files.

A real folder source over 20,000 small real files with ``on_done: keep`` (each item released
as kept the moment it is taken, as the pipeline does once its window is durable), on the
direct inotify reader.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path

import pytest
from helpers.agent_runs import wait_for

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.kept import KeptFiles, kept_path
from cdml_edge.intake.pending import PendingFiles
from cdml_edge.window.items import FileIdentity, Item

N_FILES = 20_000


class KeepingSink:
    """Counts items per path and finishes each at once as ``keep`` (budget released)."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.source: FolderSource | None = None
        self.taken: collections.Counter[str] = collections.Counter()
        self.at: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, item: Item) -> None:
        assert item.path is not None and self.source is not None
        with self.lock:
            self.taken[item.name] += 1
            self.at.setdefault(item.name, time.monotonic())
        self.source.release(item.path, keep=True)
        self.budget.release(item.charge)

    def error(self, source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        raise AssertionError(f"{name}: {exc}")

    def twice(self) -> list[str]:
        with self.lock:
            return [n for n, c in self.taken.items() if c > 1]

    def count(self) -> int:
        with self.lock:
            return len(self.taken)


def _fill(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fd = os.open(folder / f"f{i:06d}.jpg", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"%06d" % i)
        os.close(fd)


def _source(
    inbox: Path, sink: KeepingSink, record: Path | None, max_pending: int = 1024
) -> FolderSource:
    spec = FolderSpec(
        name="cam",
        path=inbox,
        modality="image",
        patterns=("*.jpg",),
        stable_seconds=0.05,
        kept_record=record,
        max_pending=max_pending,
    )
    src = FolderSource(spec, sink.budget, sink, sink.error)
    sink.source = src
    return src


def test_kept_files_are_never_scored_twice_and_new_files_stay_prompt(tmp_path: Path) -> None:
    inbox, state = tmp_path / "in", tmp_path / "state"
    _fill(inbox, N_FILES)
    record = kept_path(state, "cam")
    sink = KeepingSink(ByteBudget(10**8))
    src = _source(inbox, sink, record)
    src.start()
    try:
        wait_for(lambda: sink.count() == N_FILES, timeout=240, what="every file taken once")
        src._stopped.wait(1.5)  # rescans of the backlog had their chance to take one again
        assert sink.twice() == []
        assert src.files.kept == N_FILES
        (inbox / "new.jpg").write_bytes(b"new")
        t0 = time.monotonic()
        wait_for(lambda: "new.jpg" in sink.taken, timeout=10, what="a new file")
        assert sink.at["new.jpg"] - t0 < 2.0
    finally:
        src.stop()
    assert record.is_file()  # in the state folder

    # a restart: the record on disk remembers every kept file
    again = KeepingSink(ByteBudget(10**8))
    src = _source(inbox, again, record)
    src.start()
    try:
        (inbox / "after.jpg").write_bytes(b"after")
        wait_for(lambda: "after.jpg" in again.taken, timeout=20, what="a file after restart")
        src._stopped.wait(1.0)
        assert dict(again.taken) == {"after.jpg": 1}
    finally:
        src.stop()


def test_the_kept_record_is_bounded_by_what_is_in_the_folder(tmp_path: Path) -> None:
    """A kept file deleted or changed is forgotten: by its event, or by the next full scan."""
    inbox = tmp_path / "in"
    _fill(inbox, 50)
    record = KeptFiles(tmp_path / "kept.sqlite")
    pf = PendingFiles(max_pending=64, stable_seconds=0.1, polling=False, kept=record)
    paths = sorted(str(p) for p in inbox.iterdir())
    for p in paths:
        st = os.stat(p)
        pf.notice(p, st, closed=True, writing=False)
        pf.taken(p, FileIdentity.of(st))
        pf.release(p, keep=True)
    assert pf.kept == 50 and len(pf) == 0
    for p in paths[:10]:
        os.unlink(p)
    pf.forget(paths[0])  # its delete event
    assert pf.kept == 49
    with open(paths[10], "ab") as fh:  # changed in place (no event seen)
        fh.write(b"more")
    assert pf.prune_kept() == 10 and pf.kept == 39
    record.close()
    assert len(KeptFiles(tmp_path / "kept.sqlite")) == 39  # as remembered on disk


def test_an_unreadable_record_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "kept.sqlite"
    path.write_bytes(b"not a database" * 100)
    rec = KeptFiles(path)
    rec.put("/x", FileIdentity(1, 2, 3, 4))
    assert rec.get("/x") == FileIdentity(1, 2, 3, 4) and len(rec) == 1


def _drain_rate(tmp_path: Path, n: int) -> float:
    inbox = tmp_path / f"in{n}"
    _fill(inbox, n)
    sink = KeepingSink(ByteBudget(10**8))
    src = _source(inbox, sink, None)
    t0 = time.monotonic()
    src.start()
    try:
        wait_for(lambda: sink.count() == n, timeout=600, what=f"{n} files")
    finally:
        src.stop()
    return n / (time.monotonic() - t0)


@pytest.mark.slow
def test_intake_is_linear_in_the_files_present(tmp_path: Path) -> None:
    """Files per second draining 5,000 and 40,000 present at start: about the same.

    A rescan of the whole folder per half-backlog made it quadratic (72 files/s with 200,000).
    """
    small = _drain_rate(tmp_path, 5_000)
    big = _drain_rate(tmp_path, 40_000)
    print(f"drain: 5,000 files {small:.0f}/s, 40,000 files {big:.0f}/s")
    assert big > 0.5 * small, (small, big)


def test_a_backlog_larger_than_the_pending_bound_drains_without_pauses(tmp_path: Path) -> None:
    """The pass over the folder goes on as soon as there is room, not at the next idle wake.

    3,000 files through a pending bound of 100: thirty refills. An inotify source sleeping
    its idle second between refills would take over 30 s.
    """
    inbox = tmp_path / "in"
    _fill(inbox, 3000)
    sink = KeepingSink(ByteBudget(10**8))
    src = _source(inbox, sink, None, max_pending=100)
    t0 = time.monotonic()
    src.start()
    try:
        wait_for(lambda: sink.count() == 3000, timeout=60, what="every file taken")
        assert time.monotonic() - t0 < 12.0
        assert sink.twice() == []
    finally:
        src.stop()


def test_an_empty_kept_record_answers_without_a_query(tmp_path: Path) -> None:
    """An empty record (``on_done: delete``) answers without SQL; a row once there is found.

    Looking up and forgetting a file is done for every event of every file.
    """
    kept = KeptFiles(kept_path(tmp_path, "cam"))
    statements: list[str] = []
    kept._conn.set_trace_callback(statements.append)
    path = str(tmp_path / "a.jpg")
    assert kept.get(path) is None
    kept.remove(path)
    assert statements == []
    ident = FileIdentity(1, 2, 3, 4)
    kept.put(path, ident)
    assert kept.get(path) == ident
    kept.remove(path)
    assert kept.get(path) is None and len(kept) == 0
    assert statements  # the record was used once it held a row
