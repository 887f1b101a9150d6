"""A file written in several open/close sessions is taken whole with ``settle``.

A logger that opens, writes, closes and opens again to append (or ``cp`` then ``echo >>``)
closes the file twice; without ``settle`` its first close-write made it complete, so a half
file was scored and the rest was lost or scored as a second item. With ``settle`` a file
complete by an event is taken only once it has had no further write or close for that long
(and its identity is unchanged when looked at again). Real files on the direct inotify
reader, watchdog's inotify observer (``recursive``) and the polling observer.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from helpers.agent_runs import wait_for

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.pending import PendingFiles
from cdml_edge.window.items import Item

SETTLE_S = 3.0  # much longer than the writer's gap between its sessions (GAP_S)
GAP_S = 0.3  # the writer's pause between two sessions: a taken-at-first-close file is taken


class Sink:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.errors: list[Exception] = []
        self._lock = threading.Lock()

    def __call__(self, item: Item) -> None:
        with self._lock:
            self.items.append(item)

    def error(self, source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        self.errors.append(exc)

    def taken(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return [(i.name, i.data) for i in self.items]


WATCHES: dict[str, dict[str, object]] = {
    "inotify": {},
    "watchdog": {"recursive": True},
    "polling": {"polling": True, "poll_interval": 0.1},
}


def _source(inbox: Path, sink: Sink, watch: str, **kw: object) -> FolderSource:
    spec = FolderSpec(
        name="log",
        path=inbox,
        modality="text",
        patterns=("*.log",),
        **{"stable_seconds": 0.2, **WATCHES[watch], **kw},  # type: ignore[arg-type]
    )
    src = FolderSource(spec, ByteBudget(10**8), sink, sink.error)
    assert src.direct == (watch == "inotify")
    return src


def _sessions(path: Path, parts: list[bytes]) -> bytes:
    """Write ``parts`` in as many open/write/close sessions, ``GAP_S`` apart."""
    for n, part in enumerate(parts):
        if n:
            time.sleep(GAP_S)  # the logger's pause (what the source must sit out)
        with open(path, "ab") as f:
            f.write(part)
    return b"".join(parts)


@pytest.mark.parametrize("watch", list(WATCHES))
def test_a_file_closed_twice_is_taken_once_whole(tmp_path: Path, watch: str) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(inbox, sink, watch, settle=SETTLE_S)
    src.start()
    try:
        whole = _sessions(inbox / "a.log", [b"first half\n", b"second half\n", b"tail\n"])
        wait_for(lambda: sink.taken() != [], timeout=30, what="a.log taken")
        assert sink.taken() == [("a.log", whole)]
        # a second item would come from the last session's events: none is pending now
        wait_for(lambda: src.pending_count == 0, what="nothing pending")
        assert sink.taken() == [("a.log", whole)] and sink.errors == []
    finally:
        src.stop()


def test_without_settle_a_file_is_taken_on_its_close_write(tmp_path: Path) -> None:
    """The default (0) keeps today's latency: taken on its close-write, before any settle."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(inbox, sink, "inotify", stable_seconds=60.0)
    src.start()
    try:
        (inbox / "b.log").write_bytes(b"one session\n")
        wait_for(lambda: sink.taken() == [("b.log", b"one session\n")], what="b.log taken")
    finally:
        src.stop()


def test_settling_files_count_against_max_pending(tmp_path: Path) -> None:
    """Files waiting out ``settle`` are pending files: at most ``max_pending``; none lost."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(inbox, sink, "inotify", settle=1.0, max_pending=2)
    seen: list[int] = []
    src.start()
    try:
        for n in range(6):
            (inbox / f"{n}.log").write_bytes(b"x" * (n + 1))
            seen.append(src.pending_count)
        deadline = time.monotonic() + 30
        while len(sink.taken()) < 6 and time.monotonic() < deadline:
            seen.append(src.pending_count)
            time.sleep(0.02)
        wait_for(lambda: len(sink.taken()) == 6, timeout=30, what="all six taken")
        assert max(seen) <= 2, seen
        assert sorted(d for _, d in sink.taken()) == [b"x" * (n + 1) for n in range(6)]
    finally:
        src.stop()


def test_a_closed_file_changed_without_an_event_settles_again(tmp_path: Path) -> None:
    """The identity is looked at again before a settled file is taken: a change restarts it."""
    path = tmp_path / "c.log"
    path.write_bytes(b"first")
    files = PendingFiles(16, stable_seconds=0.0, polling=False, settle_seconds=0.3)
    files.notice(str(path), os.stat(path), closed=True, writing=False)
    assert list(files.ready()) == []  # not settled yet
    with open(path, "ab") as f:  # a write whose events were lost (an overflow, say)
        f.write(b" and more")
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1))  # mtime moves, whatever the clock
    changed = os.stat(path)
    wait_for(lambda: files.get(str(path)) is not None, what="still pending")
    first_look = time.monotonic() + 0.3
    wait_for(lambda: time.monotonic() > first_look, what="settle passed")
    assert list(files.ready()) == []  # the identity changed: settling starts again
    pend = files.get(str(path))
    assert pend is not None and pend.size == changed.st_size
    wait_for(lambda: list(files.ready()) == [str(path)], what="settled on its new identity")


def test_settle_is_a_folder_source_setting(tmp_path: Path) -> None:
    """``settle: 500ms`` in a source's config reaches the folder source (default 0)."""
    from cdml_edge.config import SourceConfig
    from cdml_edge.intake.factory import make_source

    sink = Sink()
    made = {}
    for settle in ("500ms", None):
        extra = {} if settle is None else {"settle": settle}
        sc = SourceConfig(name="log", path=tmp_path / "in", modality="text", **extra)  # type: ignore[arg-type]
        src = make_source(sc, ByteBudget(10**8), sink, sink.error)
        assert isinstance(src, FolderSource)
        made[settle] = (src.spec.settle, src.files.settle_seconds)
    assert made == {"500ms": (0.5, 0.5), None: (0.0, 0.0)}
