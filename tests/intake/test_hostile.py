"""A watched folder in a hostile field, with real folders and real inotify events.

Odd names, special files, links, files still being written at start, a folder deleted under
the source. Every test runs twice: with the direct inotify reader a local folder gets, and
with watchdog's observer (polling mounts, recursive folders, other platforms).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for
from helpers.source_sinks import Sink

from cdml_edge.intake import FolderSource, FolderSpec, NotRegularFile, SourceError, inotify
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.payloads import item_id


def _source(tmp_path: Path, sink: Sink, **kw: object) -> FolderSource:
    kw.setdefault("patterns", ("*.jpg",))
    kw.setdefault("stable_seconds", 0.1)
    spec = FolderSpec(name="cam", path=tmp_path / "in", modality="image", **kw)  # type: ignore[arg-type]
    return FolderSource(spec, ByteBudget(10**8), sink, sink.error)


@pytest.fixture(autouse=True, params=["inotify", "watchdog"])
def watcher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which watch the folder sources of a test use."""
    if request.param == "watchdog":
        monkeypatch.setattr(inotify, "available", lambda: False)
    elif not inotify.available():
        pytest.skip("inotify is Linux's")
    return str(request.param)


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    return d


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_a_non_utf8_name_is_taken_and_the_source_goes_on(
    tmp_path: Path, inbox: Path, polling: bool
) -> None:
    raw = b"bad\xff\xfe-\x1b[31m.jpg"  # invalid UTF-8 and a terminal escape
    sink = Sink()
    src = _source(tmp_path, sink, polling=polling, poll_interval=0.1)
    src.start()
    try:
        with open(os.fsencode(inbox) + b"/" + raw, "wb") as fh:
            fh.write(jpeg(10))
        wait_for(lambda: len(sink.items) == 1, what="the odd name taken")
        (inbox / "after.jpg").write_bytes(jpeg(20))
        wait_for(lambda: sink.has("after.jpg"), what="a later file taken")
    finally:
        src.stop()
    odd = next(i for i in sink.items if i.name != "after.jpg")
    # the payload name: every byte that is not UTF-8 as %XX, valid text left as it is
    assert odd.name == "bad%FF%FE-\x1b[31m.jpg"
    json.dumps(odd.name).encode("utf-8")  # serialisable as it is
    assert odd.path is not None and os.fsencode(odd.path) == os.fsencode(inbox) + b"/" + raw
    st = os.stat(odd.path)
    key = (st.st_size, st.st_mtime_ns)
    assert odd.item_id == item_id("cam", os.fsdecode(raw), *key, content=odd.data)
    assert odd.item_id != item_id("cam", odd.name, *key, content=odd.data)
    assert not sink.errors


def test_a_fifo_is_never_opened_reported_once_and_left(tmp_path: Path, inbox: Path) -> None:
    sink = Sink()
    src = _source(tmp_path, sink)
    src.start()
    try:
        os.mkfifo(inbox / "pipe.jpg")
        time.sleep(0.5)  # longer than stable_seconds: a reader opening it would block here
        os.utime(inbox / "pipe.jpg")  # another event for the same FIFO
        (inbox / "after.jpg").write_bytes(jpeg(20))
        wait_for(lambda: sink.has("after.jpg"), what="a file after the FIFO taken")
        wait_for(lambda: len(sink.errors) >= 1, what="the FIFO reported")
        time.sleep(0.4)
    finally:
        src.stop()
    assert sink.names() == ["after.jpg"]
    assert len(sink.errors) == 1, sink.errors
    source, name, exc, path = sink.errors[0]
    assert name == "pipe.jpg" and isinstance(exc, NotRegularFile) and "FIFO" in str(exc)
    assert path is None  # nothing to quarantine: it is left where it is
    assert (inbox / "pipe.jpg").exists() and src.stats.refused == 1


def test_a_socket_and_a_link_to_a_device_are_left_alone(tmp_path: Path, inbox: Path) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(inbox / "s.jpg"))
    os.symlink("/dev/zero", inbox / "zero.jpg")
    sink = Sink()
    src = _source(tmp_path, sink)
    try:
        src.start()
        (inbox / "after.jpg").write_bytes(jpeg(20))
        wait_for(lambda: sink.has("after.jpg"), what="a regular file taken")
        wait_for(lambda: len(sink.errors) == 2, what="both special files reported")
    finally:
        src.stop()
        sock.close()
    assert sink.names() == ["after.jpg"]
    assert sorted(e[1] or "" for e in sink.errors) == ["s.jpg", "zero.jpg"]


def test_a_link_to_a_secret_is_not_followed(tmp_path: Path, inbox: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$secret")
    os.symlink(secret, inbox / "leak.jpg")
    sink = Sink()
    src = _source(tmp_path, sink)
    src.start()
    try:
        os.symlink(secret, inbox / "leak2.jpg")  # one made while watching
        (inbox / "after.jpg").write_bytes(jpeg(20))
        wait_for(lambda: sink.has("after.jpg"), what="a regular file taken")
        wait_for(lambda: len(sink.errors) == 2, what="both links reported")
        time.sleep(0.3)
    finally:
        src.stop()
    assert sink.names() == ["after.jpg"]
    assert all(b"secret" not in i.data for i in sink.items)
    assert sorted(e[1] or "" for e in sink.errors) == ["leak.jpg", "leak2.jpg"]
    assert all("symbolic link" in str(e[2]) for e in sink.errors)
    assert (inbox / "leak.jpg").is_symlink() and secret.read_bytes() == b"root:$6$secret"


def test_follow_symlinks_reads_only_targets_inside_the_roots(tmp_path: Path, inbox: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "frame.jpg").write_bytes(jpeg(77))
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(jpeg(99))
    os.symlink(store / "frame.jpg", inbox / "in-root.jpg")
    os.symlink(outside, inbox / "out-of-root.jpg")
    os.symlink(tmp_path / "store" / ".." / "outside.jpg", inbox / "dotdot.jpg")
    sink = Sink()
    src = _source(tmp_path, sink, follow_symlinks=True, link_roots=(store,))
    src.start()
    try:
        wait_for(lambda: sink.has("in-root.jpg"), what="the link inside the roots taken")
        wait_for(lambda: len(sink.errors) == 2, what="two links outside the roots reported")
    finally:
        src.stop()
    assert sink.names() == ["in-root.jpg"]
    assert sink.items[0].data == jpeg(77)
    assert sorted(e[1] or "" for e in sink.errors) == ["dotdot.jpg", "out-of-root.jpg"]
    assert all("outside" in str(e[2]) for e in sink.errors)


def test_a_file_present_at_start_is_taken_only_once_stable(tmp_path: Path, inbox: Path) -> None:
    p = inbox / "slow.jpg"
    data = jpeg(50)
    fh = open(p, "wb")  # noqa: SIM115 - a writer that keeps its file open across the start
    try:
        fh.write(data[:100])
        fh.flush()
        old = time.time() - 60
        os.utime(p, (old, old))  # an old mtime: the writer paused, it has not finished
        sink = Sink()
        src = _source(tmp_path, sink, stable_seconds=0.5)
        src.start()
        try:
            time.sleep(0.25)
            assert sink.items == []  # not judged by its mtime
            fh.write(data[100:])
            fh.flush()
            fh.close()
            wait_for(lambda: len(sink.items) == 1, what="the file taken once complete")
        finally:
            src.stop()
    finally:
        fh.close()
    assert sink.items[0].data == data


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_start_up_files_wait_stable_seconds_as_seen_by_the_agent(
    tmp_path: Path, inbox: Path, polling: bool
) -> None:
    p = inbox / "old.jpg"
    p.write_bytes(jpeg(5))
    old = time.time() - 3600
    os.utime(p, (old, old))
    sink = Sink()
    src = _source(tmp_path, sink, stable_seconds=0.6, polling=polling, poll_interval=0.1)
    t0 = time.monotonic()
    src.start()
    try:
        wait_for(lambda: len(sink.items) == 1, what="the old file taken")
        waited = time.monotonic() - t0
    finally:
        src.stop()
    assert waited >= 0.6, waited


def test_an_unexpected_error_on_one_file_does_not_stop_the_source(
    tmp_path: Path, inbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cdml_edge.intake.folder as folder

    real = folder.read_regular

    def flaky(*args: object, **kw: object) -> object:
        if "poison" in str(args[0]):
            raise RuntimeError("injected fault")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(folder, "read_regular", flaky)
    sink = Sink()
    src = _source(tmp_path, sink)
    src.start()
    try:
        (inbox / "poison.jpg").write_bytes(jpeg(1))
        wait_for(lambda: len(sink.errors) == 1, what="the fault reported")
        (inbox / "after.jpg").write_bytes(jpeg(2))
        wait_for(lambda: sink.has("after.jpg"), what="a later file taken")
    finally:
        src.stop()
    source, name, exc, path = sink.errors[0]
    assert name == "poison.jpg" and isinstance(exc, SourceError)
    assert "injected fault" in str(exc) and path == inbox / "poison.jpg"
    assert src._budget.used == jpeg_size(2)  # the fault's charge was given back


def jpeg_size(value: int) -> int:
    return len(jpeg(value))


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_a_folder_deleted_and_made_again_is_watched_again(
    tmp_path: Path, inbox: Path, polling: bool
) -> None:
    from cdml_edge.supervisor import Supervisor

    sup = Supervisor(backoff_min=0.05, backoff_max=0.2)
    sink = Sink()
    spec = FolderSpec(
        name="cam",
        path=inbox,
        modality="image",
        patterns=("*.jpg",),
        stable_seconds=0.1,
        polling=polling,
        poll_interval=0.1,
    )
    src = FolderSource(spec, ByteBudget(10**8), sink, sink.error, spawn=sup.spawn)
    src.start()
    try:
        (inbox / "a.jpg").write_bytes(jpeg(1))
        wait_for(lambda: sink.has("a.jpg"), what="first file")
        shutil.rmtree(inbox)  # a clean-up script, an unmounted share
        wait_for(lambda: sup.restarts.get("src-cam", 0) >= 1, what="the watch restarted")
        wait_for(inbox.is_dir, what="folder made again")
        time.sleep(0.3)
        (inbox / "b.jpg").write_bytes(jpeg(2))
        wait_for(lambda: sink.has("b.jpg"), what="a file in the new folder taken")
    finally:
        src.stop()
        sup.close()
    assert sup.dead() == []
