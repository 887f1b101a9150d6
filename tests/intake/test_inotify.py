"""The direct inotify reader: real events of a real folder, folded into one notice per file."""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest

from cdml_edge.intake import inotify
from cdml_edge.intake.inotify import CLOSED, SEEN, WRITING, InotifyWatch, Notice, coalesce

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux's")


def _read(watch: InotifyWatch) -> list[Notice]:
    got: list[Notice] = []
    while watch.wait(0.2):
        notices, _ = watch.read()
        got += notices
    return got


@pytest.fixture
def watch(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = InotifyWatch(str(tmp_path))
    yield w
    w.close()


def test_a_file_written_and_closed_is_one_complete_notice(
    tmp_path: Path, watch: InotifyWatch
) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x" * 100)
    assert _read(watch) == [Notice(str(tmp_path / "a.jpg"), state=CLOSED)]


def test_a_file_still_open_is_being_written(tmp_path: Path, watch: InotifyWatch) -> None:
    with open(tmp_path / "a.jpg", "wb") as fh:
        fh.write(b"x")
        fh.flush()
        assert _read(watch) == [Notice(str(tmp_path / "a.jpg"), state=WRITING)]
    assert _read(watch) == [Notice(str(tmp_path / "a.jpg"), state=CLOSED)]


def test_a_rename_within_completes_a_rename_in_waits(tmp_path: Path, watch: InotifyWatch) -> None:
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.jpg").write_bytes(b"y")
    (tmp_path / "a.jpg.tmp").write_bytes(b"x")
    _read(watch)
    os.rename(tmp_path / "a.jpg.tmp", tmp_path / "a.jpg")
    os.rename(elsewhere / "b.jpg", tmp_path / "b.jpg")
    assert _read(watch) == [
        Notice(str(tmp_path / "a.jpg.tmp"), forget=True),
        Notice(str(tmp_path / "a.jpg"), state=CLOSED),
        Notice(str(tmp_path / "b.jpg"), state=SEEN),
    ]
    shutil.rmtree(elsewhere)


def test_deleted_touched_and_odd_names(tmp_path: Path, watch: InotifyWatch) -> None:
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9.jpg")  # not UTF-8
    with open(odd, "wb") as fh:
        fh.write(b"z")
    (tmp_path / "gone.jpg").write_bytes(b"g")
    _read(watch)
    os.utime(odd)
    os.unlink(tmp_path / "gone.jpg")
    os.mkdir(tmp_path / "sub.jpg")  # folders are not files
    assert _read(watch) == [
        Notice(os.fsdecode(odd), state=SEEN),
        Notice(str(tmp_path / "gone.jpg"), forget=True),
    ]


def test_the_folder_removed_ends_the_watch(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    watch = InotifyWatch(str(folder))
    try:
        assert watch.alive
        shutil.rmtree(folder)
        _read(watch)
        assert not watch.alive
    finally:
        watch.close()


def test_a_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        InotifyWatch(str(tmp_path / "nowhere"))


def test_wake_ends_a_wait_without_events(watch: InotifyWatch) -> None:
    watch.wake()
    assert watch.wait(5.0) is False


def test_coalesce_keeps_the_order_of_what_happened() -> None:
    """Events in one read fold per path; a rename's cookie pairs across reads."""
    recent: OrderedDict[int, str] = OrderedDict()
    mod, close, create = inotify.IN_MODIFY, inotify.IN_CLOSE_WRITE, inotify.IN_CREATE
    assert coalesce([("a", create, 0), ("a", mod, 0), ("a", close, 0), ("a", mod, 0)]) == [
        Notice("a", state=WRITING)
    ]
    assert coalesce([("a", close, 0), ("a", inotify.IN_DELETE, 0), ("a", create, 0)]) == [
        Notice("a", forget=True, state=SEEN)
    ]
    assert coalesce([("t", inotify.IN_MOVED_FROM, 7)], recent) == [Notice("t", forget=True)]
    assert coalesce([("a", inotify.IN_MOVED_TO, 7)], recent) == [Notice("a", state=CLOSED)]
    assert coalesce([("b", inotify.IN_MOVED_TO, 7)], recent) == [Notice("b", state=SEEN)]
