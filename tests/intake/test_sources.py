"""Folder source on real watchdog events (inotify and polling), camera source on a video file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.agent_runs import jpeg, wait_for, write_atomic

from cdml_edge.intake import (
    CameraSource,
    CameraSpec,
    CameraTransition,
    FileTooLarge,
    FolderSource,
    FolderSpec,
    SourceError,
    is_candidate,
)
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.items import Item
from cdml_edge.window.payloads import item_id


class Sink:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.errors: list[tuple[str, str | None, Exception]] = []
        self._lock = threading.Lock()

    def __call__(self, item: Item) -> None:
        with self._lock:
            self.items.append(item)

    def error(self, source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        self.errors.append((source, name, exc))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(i.name for i in self.items)


def _source(tmp_path: Path, sink: Sink, budget: int = 10**8, **kw: object) -> FolderSource:
    spec = FolderSpec(name="cam", path=tmp_path / "in", modality="image", **kw)  # type: ignore[arg-type]
    return FolderSource(spec, ByteBudget(budget), sink, sink.error)


def test_candidate_names() -> None:
    pats = ("*.jpg",)
    assert is_candidate("a.jpg", pats)
    assert not is_candidate("a.jpg.tmp", pats)
    assert not is_candidate("a.part", ("*",))
    assert not is_candidate(".hidden.jpg", pats)
    assert not is_candidate("a.png", pats)


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_takes_complete_files_once_and_ignores_temporaries(tmp_path: Path, polling: bool) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "early.jpg").write_bytes(jpeg(10))  # present before start: crash recovery
    sink = Sink()
    src = _source(
        tmp_path, sink, patterns=("*.jpg",), polling=polling, poll_interval=0.1, stable_seconds=0.2
    )
    src.start()
    try:
        (inbox / "direct.jpg").write_bytes(jpeg(20))  # close-write
        write_atomic(inbox / "renamed.jpg", jpeg(30))  # .tmp then rename
        (inbox / "ignored.jpg.part").write_bytes(b"partial")
        (inbox / ".dot.jpg").write_bytes(jpeg(40))
        (inbox / "other.png").write_bytes(b"not matched")
        wait_for(lambda: len(sink.items) >= 3, what="three files taken")
        # let any duplicate events and polling rounds pass
        src._stopped.wait(0.6)
        assert sink.names() == ["direct.jpg", "early.jpg", "renamed.jpg"]
        by_name = {i.name: i for i in sink.items}
        d = by_name["direct.jpg"]
        assert d.data == jpeg(20) and d.path == inbox / "direct.jpg"
        st = (inbox / "direct.jpg").stat()
        assert d.item_id == item_id("cam", "direct.jpg", st.st_size, st.st_mtime_ns, content=d.data)
        assert d.ts == pytest.approx(st.st_mtime, abs=1e-3)
        assert not sink.errors
    finally:
        src.stop()


def test_a_file_being_written_is_not_taken_until_closed(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",), stable_seconds=0.1)
    src.start()
    try:
        data = jpeg(50)
        with open(inbox / "slow.jpg", "wb") as fh:
            fh.write(data[:100])
            fh.flush()
            src._stopped.wait(0.4)  # longer than stable_seconds, still open
            assert sink.items == []
            fh.write(data[100:])
        wait_for(lambda: len(sink.items) == 1, what="file taken after close")
        assert sink.items[0].data == data
    finally:
        src.stop()


def test_budget_full_pauses_intake_and_leaves_files_on_disk(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    size = len(jpeg(1))
    budget = ByteBudget(size)  # room for one file at a time
    spec = FolderSpec(name="cam", path=inbox, modality="image", patterns=("*.jpg",))
    src = FolderSource(spec, budget, sink, sink.error)
    src.start()
    try:
        for n in range(3):
            (inbox / f"{n}.jpg").write_bytes(jpeg(1))
        wait_for(lambda: len(sink.items) == 1, what="first file taken")
        wait_for(lambda: src.stats.paused > 0, what="intake paused")
        # the scanner may pause on 1.jpg before the observer has delivered 2.jpg's event
        wait_for(lambda: src.pending_count == 2, what="the other two files pending")
        assert len(sink.items) == 1
        assert sorted(p.name for p in inbox.iterdir()) == ["0.jpg", "1.jpg", "2.jpg"]
        for k in (2, 3):
            budget.release(sink.items[-1].nbytes)
            wait_for(lambda k=k: len(sink.items) == k, what=f"file {k} taken after release")
        assert sink.names() == ["0.jpg", "1.jpg", "2.jpg"]
    finally:
        src.stop()


def test_kept_file_is_taken_again_only_when_changed(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",), stable_seconds=0.1)
    src.start()
    try:
        p = inbox / "a.jpg"
        p.write_bytes(jpeg(1))
        wait_for(lambda: len(sink.items) == 1, what="taken")
        src.release(p, keep=True)
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # an event, but the same file
        src._stopped.wait(0.4)
        assert len(sink.items) == 1
        p.write_bytes(jpeg(200))  # a new version of the file
        wait_for(lambda: len(sink.items) == 2, what="changed file retaken")
        assert sink.items[0].item_id != sink.items[1].item_id
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: new mtime
        wait_for(lambda: len(sink.items) == 3, what="touched file retaken")
    finally:
        src.stop()


def test_vanished_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",))  # not started: drive the scanner by hand
    p = inbox / "gone.jpg"
    p.write_bytes(jpeg(1))
    src._notice(str(p), closed=True)
    p.unlink()
    assert src._take(str(p)) is True
    assert sink.items == []
    (source, name, exc) = sink.errors[0]
    assert source == "cam" and name == "gone.jpg" and isinstance(exc, SourceError)
    assert "vanished" in str(exc) and "gone.jpg" in str(exc)


def _video(path: Path, frames: int) -> Path:
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 25, (64, 48))
    assert vw.isOpened()
    for n in range(frames):
        vw.write(np.full((48, 64, 3), (n * 20) % 256, dtype=np.uint8))
    vw.release()
    return path


def test_camera_from_video_file_encodes_jpeg_in_memory(tmp_path: Path) -> None:
    video = _video(tmp_path / "clip.avi", frames=6)
    sink = Sink()
    cam = CameraSource(CameraSpec("cam", str(video), fps=200), ByteBudget(10**8), sink, sink.error)
    cam.start()
    assert cam.finished.wait(10)
    cam.stop()
    assert len(sink.items) == 6
    for it in sink.items:
        assert it.data[:2] == b"\xff\xd8" and it.path is None
        img = cv2.imdecode(np.frombuffer(it.data, np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (48, 64, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.avi"]  # nothing written


def test_camera_skips_and_counts_frames_over_budget(tmp_path: Path) -> None:
    video = _video(tmp_path / "clip.avi", frames=5)
    sink = Sink()
    cam = CameraSource(CameraSpec("cam", str(video), fps=200), ByteBudget(1), sink, sink.error)
    cam.start()
    assert cam.finished.wait(10)
    cam.stop()
    # the first frame is admitted on an empty budget and never released: the rest are skipped
    assert len(sink.items) == 1 and cam.stats.skipped == 4


def test_camera_that_cannot_open_keeps_retrying_and_reports_once(tmp_path: Path) -> None:
    changes: list[CameraTransition] = []
    sink = Sink()
    spec = CameraSpec(
        "cam", str(tmp_path / "missing.avi"), reconnect_first_s=0.05, reconnect_max_s=0.1
    )
    cam = CameraSource(spec, ByteBudget(100), sink, sink.error, changes.append)
    cam.start()
    try:
        wait_for(lambda: cam.health().failed_attempts >= 3, timeout=30, what="3 attempts")
        assert not cam.finished.is_set()
    finally:
        cam.stop()
    assert sink.items == [] and sink.errors == []
    assert [c.state for c in changes] == ["reconnecting", "stopped"]
    assert "cannot open" in (changes[0].reason or "") and "missing.avi" in cam.url


def test_read_error_names_the_file(tmp_path: Path) -> None:
    from cdml_edge.intake.regular import LinkPolicy, read_regular

    with pytest.raises(SourceError, match="nothere.jpg"):
        read_regular(str(tmp_path / "nothere.jpg"), 1, LinkPolicy())


def test_file_renamed_in_from_another_folder_is_taken(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    outside = tmp_path / "staging.jpg"
    outside.write_bytes(jpeg(60))
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",), stable_seconds=0.1)
    src.start()
    try:
        os.replace(outside, inbox / "moved-in.jpg")  # inotify: IN_MOVED_TO without a source
        wait_for(lambda: len(sink.items) == 1, what="renamed-in file taken")
        assert sink.items[0].name == "moved-in.jpg" and sink.items[0].data == jpeg(60)
    finally:
        src.stop()


def test_backlog_beyond_max_pending_stays_on_disk_and_is_rescanned(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    size = len(jpeg(1))
    budget = ByteBudget(size)  # one file in flight: the backlog builds up on disk
    spec = FolderSpec(name="cam", path=inbox, modality="image", patterns=("*.jpg",), max_pending=4)
    src = FolderSource(spec, budget, sink, sink.error)
    src.start()
    try:
        for n in range(12):
            (inbox / f"{n:02d}.jpg").write_bytes(jpeg(1))
        wait_for(lambda: len(sink.items) == 1, what="first file")
        src._stopped.wait(0.3)
        assert src.pending_count <= 4
        while len(sink.items) < 12:
            k = len(sink.items)
            budget.release(sink.items[-1].nbytes)
            wait_for(lambda k=k: len(sink.items) == k + 1, what=f"file {k + 1}")
        assert sink.names() == [f"{n:02d}.jpg" for n in range(12)]
        assert src.rescans >= 1
    finally:
        src.stop()


def test_file_too_large_is_refused_without_reading_it(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    # a 4x charge: a 1 MiB budget takes files up to 256 KiB; the window caps them at 100 KB
    spec = FolderSpec(
        name="cam", path=inbox, modality="image", patterns=("*.jpg",), max_file_bytes=100_000
    )
    budget = ByteBudget(2**20, data_factor=4)
    src = FolderSource(spec, budget, sink, sink.error)  # not started: driven by hand
    assert src.max_file_bytes() == 100_000
    p = inbox / "huge.jpg"
    with open(p, "wb") as fh:
        fh.truncate(2**31)  # sparse: 2 GiB that take no disk
    src._notice(str(p), closed=True)
    assert src._take(str(p)) is True
    assert sink.items == [] and budget.used == 0 and budget.peak == 0
    (source, name, exc) = sink.errors[0]
    assert isinstance(exc, FileTooLarge) and name == "huge.jpg"
    assert f"too large: {2**31} bytes, limit 100000" in str(exc)
    assert src.pending_count == 0
    big = ByteBudget(2**20, data_factor=4)  # without a window cap the budget's share rules
    assert (
        FolderSource(
            FolderSpec(name="c", path=inbox, modality="image"), big, sink, sink.error
        ).max_file_bytes()
        == 2**18
    )


def test_file_grown_after_stable_check_waits_until_stable_again(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",))  # not started: driven by hand
    p = inbox / "growing.jpg"
    p.write_bytes(b"x" * 1000)
    src._notice(str(p), closed=True)
    with open(p, "ab") as fh:
        fh.write(b"y" * 5000)  # grows after it was judged complete
    assert src._take(str(p)) is True
    assert sink.items == [] and src._budget.used == 0
    pend = src.files.get(str(p))
    assert pend is not None and pend.size == 6000 and not pend.closed  # judged again once stable
    src._notice(str(p), closed=True)
    assert src._take(str(p)) is True
    assert [i.size for i in sink.items] == [6000] and len(sink.items[0].data) == 6000


def test_watchdog_6_reports_a_touch_as_modified_and_it_is_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """watchdog 6 (last for Python 3.10) has no FileAttribEvent: a touch arrives as a modification.

    There a change of mtime alone is a touch (complete once stable); the modification of a write
    (new size, or the identity already noticed) waits for close-write.
    """
    from watchdog.events import FileCreatedEvent, FileModifiedEvent

    from cdml_edge.intake import folder
    from cdml_edge.window.items import FileIdentity

    monkeypatch.setattr(folder, "_ATTRIB_EVENT", None)
    inbox = tmp_path / "in"
    inbox.mkdir()
    src = _source(tmp_path, Sink(), patterns=("*.jpg",), stable_seconds=0.1)
    handler = folder._Handler(src)
    p = inbox / "a.jpg"
    p.write_bytes(b"x" * 10)
    handler.on_any_event(FileCreatedEvent(str(p)))
    handler.on_any_event(FileModifiedEvent(str(p)))  # the IN_MODIFY of that same write
    pend = src.files.get(str(p))
    assert pend is not None and pend.writing
    src.files.taken(str(p), FileIdentity.of(p.stat()))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched
    handler.on_any_event(FileModifiedEvent(str(p)))
    pend = src.files.get(str(p))
    assert pend is not None and not pend.writing
    with open(p, "ab") as fh:  # appended to: a write
        fh.write(b"y")
    handler.on_any_event(FileModifiedEvent(str(p)))
    pend = src.files.get(str(p))
    assert pend is not None and pend.writing


def test_a_future_mtime_is_clamped_to_when_the_file_was_seen(tmp_path: Path) -> None:
    """A clock gone wrong (mtime in 2100) gave results a ts in 2100 and latency_ms 0."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    sink = Sink()
    src = _source(tmp_path, sink, patterns=("*.jpg",), stable_seconds=0.05)
    src.start()
    try:
        t0 = time.time()
        # The mtime is set before the rename: set after it, a loaded machine could let the
        # source see the file (and find it stable) with its real mtime first.
        tmp = inbox / "future.jpg.tmp"
        tmp.write_bytes(jpeg(1))
        os.utime(tmp, (4_102_444_800, 4_102_444_800))  # 2100-01-01
        tmp.rename(inbox / "future.jpg")
        write_atomic(inbox / "now.jpg", jpeg(2))
        wait_for(lambda: len(sink.items) == 2, what="both files")
    finally:
        src.stop()
    by_name = {i.name: i for i in sink.items}
    future = by_name["future.jpg"]
    assert t0 - 1 <= future.ts <= time.time() + 1  # clamped to when the agent saw it
    assert future.mtime_ns == 4_102_444_800 * 10**9  # the file's own mtime (and id) unchanged
    assert src.stats.future_mtime == 1
    assert abs(by_name["now.jpg"].ts - t0) < 5


def test_a_file_is_read_in_one_read_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdml_edge.intake import regular

    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg(60))
    calls: list[int] = []
    real_read = os.read

    def counted(fd: int, n: int) -> bytes:
        calls.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counted)
    data, st = regular.read_regular(str(path), len(jpeg(60)) + 1, regular.LinkPolicy())
    assert data == jpeg(60) and st.st_size == len(data)
    assert len(calls) == 1  # no buffered file object: no fstat, ioctl, lseek or last read


@pytest.mark.parametrize(
    ("size", "at_most", "want"),
    [(10_000, 10_001, 10_000), (10_000, 4_000, 4_000), (10_000, 10_000, 10_000)],
)
def test_short_reads_are_read_on_to_the_end_or_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, at_most: int, want: int
) -> None:
    from cdml_edge.intake import regular

    path = tmp_path / "a.bin"
    body = os.urandom(size)
    path.write_bytes(body)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 999)))  # short reads
    data, _ = regular.read_regular(str(path), at_most, regular.LinkPolicy())
    assert data == body[:want]


def test_a_file_grown_since_its_fstat_reads_past_the_expected_size(tmp_path: Path) -> None:
    from cdml_edge.intake import regular

    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with open(path, "ab") as fh:  # grows between the fstat and the read
            fh.write(b"y" * 100)
        assert regular._read_fd(fd, 101, size) == b"x" * 100 + b"y"  # growth shows
    finally:
        os.close(fd)
