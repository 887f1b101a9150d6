"""A file renamed after it was taken is the same file: taken once, finished where it is now.

A writer that writes under a temporary name the source does not ignore (``frame.writing``
with ``patterns: ["*"]``) and renames it once closed: the source took it on its close-write,
and the rename must not make a second item of the same bytes. ``on_done`` then acts on the
file under its new name. Real files in real folders, with the direct inotify reader, watchdog's
inotify observer and watchdog's polling observer, and with the start-up scan.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for
from helpers.source_sinks import Sink

from cdml_edge.intake import FolderSource, FolderSpec, inotify
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.window.items import Item

WATCHES = ["inotify", "watchdog", "polling"]


def _source(tmp_path: Path, sink: Sink, watch: str, **kw: object) -> FolderSource:
    kw.setdefault("patterns", ("*",))  # the temporary name is not ignored
    kw.setdefault("stable_seconds", 0.1)
    if watch == "polling":
        kw.update(polling=True, poll_interval=0.1)
    spec = FolderSpec(name="cam", path=tmp_path / "in", modality="image", **kw)  # type: ignore[arg-type]
    return FolderSource(spec, ByteBudget(10**8), sink, sink.error)


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    return d


def _use(watch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if watch == "watchdog":  # watchdog's inotify observer (recursive folders, other platforms)
        monkeypatch.setattr(inotify, "available", lambda: False)
    elif watch == "inotify" and not inotify.available():
        pytest.skip("inotify is Linux's")


def _renamed(src: FolderSource) -> int:
    return getattr(src.stats, "renamed", 0)


def _scored(item: Item) -> tuple[Path, object, str]:
    """What the pipeline hands to on_done: the path taken, its identity, its SHA-256."""
    assert item.path is not None and item.identity is not None
    return item.path, item.identity, hashlib.sha256(item.data).hexdigest()


def _write_then_rename(inbox: Path, sink: Sink, data: bytes) -> Item:
    """Write ``frame.writing``, wait until it is taken, rename it to ``frame.jpg``."""
    (inbox / "frame.writing").write_bytes(data)
    wait_for(lambda: len(sink.items) == 1, what="the file taken under its temporary name")
    os.rename(inbox / "frame.writing", inbox / "frame.jpg")
    return sink.items[0]


def _settle(src: FolderSource, inbox: Path, sink: Sink, n: int) -> None:
    """Wait for the rename to be judged, then for a later file: what the rename did is done.

    ``after.jpg`` is newer than the renamed file: it is taken after any second take of it.
    """
    wait_for(lambda: _renamed(src) > 0 or len(sink.items) > n, what="the rename judged")
    (inbox / "after.jpg").write_bytes(jpeg(99))
    wait_for(lambda: "after.jpg" in sink.names(), what="a later file taken")


@pytest.mark.parametrize("watch", WATCHES)
@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_file_renamed_in_flight_is_taken_once_and_finished_under_its_new_name(
    tmp_path: Path, inbox: Path, monkeypatch: pytest.MonkeyPatch, watch: str, on_done: str
) -> None:
    _use(watch, monkeypatch)
    sink = Sink()
    src = _source(tmp_path, sink, watch)
    lc = FileLifecycle(tmp_path / "quarantine", 10**6)
    src.start()
    try:
        data = jpeg(10)
        first = _write_then_rename(inbox, sink, data)  # renamed while its item is in flight
        _settle(src, inbox, sink, 1)
        assert sink.names() == ["after.jpg", "frame.writing"]  # not "frame.jpg" a second time
        assert _renamed(src) == 1
        path, ident, sha = _scored(first)
        assert path == inbox / "frame.writing"
        lc.finish(path, on_done, tmp_path / "done", identity=ident, sha256=sha)  # type: ignore[arg-type]
        src.release(path, keep=False)
        assert not (inbox / "frame.jpg").exists()  # finished where it is now
        if on_done == "move":
            assert (tmp_path / "done/frame.jpg").read_bytes() == data
        assert lc.gone == 0 and lc.changed == 0 and lc.renamed == 1
        assert sorted(p.name for p in inbox.iterdir()) == ["after.jpg"]
        assert not sink.errors
    finally:
        src.stop()


@pytest.mark.parametrize("watch", WATCHES)
def test_a_kept_file_renamed_is_not_taken_again_nor_after_a_restart(
    tmp_path: Path, inbox: Path, monkeypatch: pytest.MonkeyPatch, watch: str
) -> None:
    _use(watch, monkeypatch)
    record = tmp_path / "kept.sqlite"
    sink = Sink()
    src = _source(tmp_path, sink, watch, kept_record=record)
    src.start()
    try:
        first = _write_then_rename(inbox, sink, jpeg(20))
        _settle(src, inbox, sink, 1)
        src.release(first.path, keep=True)  # type: ignore[arg-type]  # on_done: keep
        src.release(sink.items[-1].path, keep=True)  # type: ignore[arg-type]
        assert sink.names() == ["after.jpg", "frame.writing"]
    finally:
        src.stop()
    again = Sink()  # a restart: the start-up scan finds frame.jpg, kept under its new name
    src = _source(tmp_path, again, watch, kept_record=record)
    src.start()
    try:
        (inbox / "later.jpg").write_bytes(jpeg(30))
        wait_for(lambda: "later.jpg" in again.names(), what="a new file taken after the restart")
        wait_for(lambda: src.files.kept >= 2, what="the start-up scan done")
        src._stopped.wait(0.3)  # frame.jpg (stable_seconds 0.1) would have been taken by now
        assert again.names() == ["later.jpg"]
    finally:
        src.stop()


def test_a_rename_found_by_the_start_up_scan_is_not_taken_again(
    tmp_path: Path, inbox: Path
) -> None:
    """No event at all: a rescan (or the start-up scan of a re-armed watch) finds the new name."""
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")  # not started: the scanner is driven by hand
    tmp = inbox / "frame.writing"
    tmp.write_bytes(jpeg(40))
    src._initial_scan()
    pend = src.files.get(str(tmp))
    assert pend is not None
    pend.closed = True  # as if stable for stable_seconds
    assert src._take(str(tmp)) is True and len(sink.items) == 1
    os.rename(tmp, inbox / "frame.jpg")
    src._initial_scan()
    assert src.pending_count == 0 and _renamed(src) == 1
    assert src.files.in_flight == 1
    src.release(tmp, keep=False)
    assert src.files.in_flight == 0


def test_a_rename_seen_before_the_first_take_was_recorded_is_caught_at_the_take(
    tmp_path: Path, inbox: Path
) -> None:
    """watchdog delivers events from its own thread: the new name may be pending already.

    The take of ``frame.writing`` read the file before the rename; the event for
    ``frame.jpg`` came before that take was recorded, so ``frame.jpg`` waits as pending.
    Its take sees the same file in flight and does not read it.
    """
    from cdml_edge.window.items import FileIdentity

    sink = Sink()
    src = _source(tmp_path, sink, "watchdog")
    tmp, final = inbox / "frame.writing", inbox / "frame.jpg"
    tmp.write_bytes(jpeg(70))
    ident = FileIdentity.of(os.stat(tmp))  # what the first take read
    os.rename(tmp, final)
    src._notice(str(final), closed=True)  # the observer's thread, before the take is recorded
    assert src.files.get(str(final)) is not None
    src.files.taken(str(tmp), ident)  # the first take, recorded now
    assert src._take(str(final)) is True
    assert sink.items == [] and src.pending_count == 0 and _renamed(src) == 1
    assert src.files.in_flight == 1


def test_a_kept_file_renamed_after_its_window_is_kept_under_its_new_name(
    tmp_path: Path, inbox: Path
) -> None:
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")
    tmp, final = inbox / "frame.writing", inbox / "frame.jpg"
    tmp.write_bytes(jpeg(80))
    src._notice(str(tmp), closed=True)
    assert src._take(str(tmp)) is True
    src.release(tmp, keep=True)  # on_done: keep
    os.rename(tmp, final)
    src._gone(str(tmp))  # the events of the rename
    src._notice(str(final), closed=True)
    assert src.pending_count == 0 and _renamed(src) == 1 and src.files.kept == 1
    src._initial_scan()
    assert src.pending_count == 0 and len(sink.items) == 1


def test_a_renamed_file_the_finishing_could_not_act_on_is_reported_and_left(
    tmp_path: Path, inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Released without keep but still in the folder (quarantine looked under the old name).

    A log line names both names; it is left, as any file its on_done could not act on, and
    taken again by a rescan (at least once).
    """
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")
    tmp = inbox / "frame.writing"
    tmp.write_bytes(jpeg(50))
    src._notice(str(tmp), closed=True)
    assert src._take(str(tmp)) is True
    os.rename(tmp, inbox / "frame.jpg")
    src._notice(str(inbox / "frame.jpg"), closed=True)
    assert src.pending_count == 0 and _renamed(src) == 1
    with caplog.at_level("WARNING"):
        src.release(tmp, keep=False)  # nothing was done with it: it is still there
    assert "renamed to" in caplog.text and "frame.jpg" in caplog.text
    assert src.files.in_flight == 0 and src.pending_count == 0
    src._initial_scan()
    assert src.files.get(str(inbox / "frame.jpg")) is not None


def test_a_writer_that_reuses_its_temporary_name_gets_each_file_taken_once(
    tmp_path: Path, inbox: Path
) -> None:
    """Two takes of one name in flight at once: released oldest first, each where it is."""
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")
    tmp = inbox / "frame.writing"
    for n in (1, 2):
        tmp.write_bytes(jpeg(n))
        src._notice(str(tmp), closed=True)
        assert src._take(str(tmp)) is True
        os.rename(tmp, inbox / f"frame{n}.jpg")
        src._notice(str(tmp), closed=False)  # gone: nothing noticed
        src._notice(str(inbox / f"frame{n}.jpg"), closed=True)
    src._initial_scan()
    assert src.pending_count == 0 and _renamed(src) == 2 and src.files.in_flight == 2
    src.release(tmp, keep=True)
    src.release(tmp, keep=True)
    assert src.files.in_flight == 0 and src.files.kept == 2
    src._initial_scan()
    assert src.pending_count == 0 and [i.name for i in sink.items] == ["frame.writing"] * 2


def test_a_window_retried_after_the_rename_takes_the_file_under_its_new_name(
    tmp_path: Path, inbox: Path
) -> None:
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")
    tmp = inbox / "frame.writing"
    tmp.write_bytes(jpeg(60))
    src._notice(str(tmp), closed=True)
    assert src._take(str(tmp)) is True
    os.rename(tmp, inbox / "frame.jpg")
    src._notice(str(inbox / "frame.jpg"), closed=True)
    src.retry(tmp, 0.0)  # its window failed as a whole
    assert src.files.get(str(inbox / "frame.jpg")) is not None
    assert src._take(str(inbox / "frame.jpg")) is True
    assert [i.name for i in sink.items] == ["frame.writing", "frame.jpg"]


def test_a_file_renamed_in_flight_and_held_for_the_ring_is_retried_where_it_is(
    tmp_path: Path, inbox: Path
) -> None:
    sink = Sink()
    src = _source(tmp_path, sink, "inotify")
    tmp, final = inbox / "frame.writing", inbox / "frame.jpg"
    tmp.write_bytes(jpeg(90))
    src._notice(str(tmp), closed=True)
    assert src._take(str(tmp)) is True
    os.rename(tmp, final)
    src._gone(str(tmp))
    src._notice(str(final), closed=True)
    src.hold(tmp)  # the ring failed: the file waits, not taken again
    src._notice(str(final), closed=True)
    src._initial_scan()
    assert src.pending_count == 0 and src.files.in_flight == 0
    src.retry(tmp, 0.0)  # the ring writes again: taken again, where it is now
    assert src._take(str(final)) is True
    assert [i.name for i in sink.items] == ["frame.writing", "frame.jpg"]


# -- the finishing on its own ---------------------------------------------------------------


def _read(p: Path) -> tuple[object, str]:
    from cdml_edge.window.items import FileIdentity

    return FileIdentity.of(os.stat(p)), hashlib.sha256(p.read_bytes()).hexdigest()


def test_on_done_follows_a_rename_within_the_folder(tmp_path: Path) -> None:
    lc = FileLifecycle(tmp_path / "quarantine", 10**6)
    old, new = tmp_path / "a.writing", tmp_path / "a.jpg"
    old.write_bytes(b"scored")
    ident, sha = _read(old)
    os.rename(old, new)
    assert lc.finish(old, "move", tmp_path / "done", identity=ident, sha256=sha) == (  # type: ignore[arg-type]
        tmp_path / "done/a.jpg"
    )
    assert not new.exists() and lc.renamed == 1 and lc.gone == 0


def test_on_done_never_follows_to_another_file(tmp_path: Path) -> None:
    """Another file of the folder, or the renamed one changed since: left, counted."""
    lc = FileLifecycle(tmp_path / "quarantine", 10**6)
    old, new = tmp_path / "a.writing", tmp_path / "a.jpg"
    old.write_bytes(b"scored")
    (tmp_path / "b.jpg").write_bytes(b"scored")  # same bytes, another inode
    ident, sha = _read(old)
    os.rename(old, new)
    with open(new, "r+b") as fh:  # rewritten in place, size and mtime put back
        st = os.fstat(fh.fileno())
        fh.write(b"S")
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert lc.finish(old, "delete", identity=ident, sha256=sha) is None  # type: ignore[arg-type]
    assert new.read_bytes() == b"Scored" and (tmp_path / "b.jpg").exists()
    assert lc.deleted == 0 and lc.changed == 1 and lc.renamed == 0
    os.unlink(new)
    assert lc.finish(old, "delete", identity=ident, sha256=sha) is None  # type: ignore[arg-type]
    assert (tmp_path / "b.jpg").exists() and lc.gone == 1
