"""Quarantine on a full disk is a state like the other stores'.

Degraded, counted, one event per episode, retried until it works, then the file is in
quarantine with an event.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from helpers.agent_runs import wait_for
from helpers.full_disk import FullDisk

from cdml_edge.intake import finishing as lifecycle
from cdml_edge.intake.finishing import FileLifecycle


def _lifecycle(disk: FullDisk, events: list[Any], late: list[Any]) -> FileLifecycle:
    disk.inject_call(lifecycle, "move_file")
    disk.inject_call(lifecycle, "atomic_write")
    return FileLifecycle(
        disk.path / "quarantine",
        10**6,
        retry_s=0.05,
        on_event=lambda kind, info: events.append(kind),
        on_late=lambda source, name, dest: late.append((source, name, dest)),
    )


def test_a_full_disk_is_degraded_then_the_file_is_quarantined_when_space_returns(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    events: list[str] = []
    late: list[tuple[str, str, Path]] = []
    lc = _lifecycle(full_disk, events, late)
    inbox = tmp_path / "in"  # another file system than the tmpfs: the move is a copy
    inbox.mkdir()
    bad = inbox / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not a jpeg" * 100)
    full_disk.fill()
    try:
        assert lc.quarantine("cam", "bad.jpg", bad) is None
        assert lc.faults.degraded and "ENOSPC" in lc.faults.degraded
        assert events == ["quarantine_disk_full"] and bad.exists()
        assert lc.quarantine("cam", "frame-1.jpg", None, b"frame bytes") is None
        assert lc.failures == 2 and lc.backlog == 1 and events == ["quarantine_disk_full"]
    finally:
        full_disk.free()
    wait_for(lambda: len(late) == 1, timeout=10, what="the quarantine retried")
    ((source, name, dest),) = late
    assert (source, name) == ("cam", "bad.jpg") and not bad.exists()
    assert dest.read_bytes() == b"\xff\xd8 not a jpeg" * 100
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    assert events == ["quarantine_disk_full", "quarantine_disk_ok"]
    assert lc.faults.degraded is None and lc.backlog == 0 and lc.quarantined == 1
    lc.close()


def test_an_io_error_is_a_state_too_and_a_file_gone_meanwhile_is_forgotten(
    tmp_path: Path, monkeypatch: Any
) -> None:
    events: list[str] = []
    late: list[Any] = []
    fail = {"on": True}
    real = lifecycle.move_file

    def move(*args: Any, **kw: Any) -> Path:
        if fail["on"]:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args, **kw)

    monkeypatch.setattr(lifecycle, "move_file", move)
    lc = FileLifecycle(
        tmp_path / "q",
        10**6,
        retry_s=0.05,
        on_event=lambda kind, info: events.append(kind),
        on_late=lambda *a: late.append(a),
    )
    a, b = tmp_path / "a.jpg", tmp_path / "b.jpg"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    assert lc.quarantine("cam", "a.jpg", a) is None
    assert lc.quarantine("cam", "b.jpg", b) is None
    assert events == ["quarantine_io_error"] and lc.backlog == 2
    b.unlink()  # gone before the retry: nothing to quarantine, not retried again
    fail["on"] = False
    wait_for(lambda: lc.backlog == 0, timeout=10, what="the backlog retried")
    assert [x[1] for x in late] == ["a.jpg"] and events[-1] == "quarantine_disk_ok"
    lc.close()


def test_a_frame_that_failed_leaves_no_backlog_and_the_state_still_ends(
    full_disk: FullDisk,
) -> None:
    """Nothing is retried for a camera frame: the quarantine probes its disk instead."""
    events: list[str] = []
    lc = _lifecycle(full_disk, events, [])
    full_disk.fill()
    try:
        assert lc.quarantine("cam", "frame-1.jpg", None, b"frame bytes") is None
        assert lc.backlog == 0 and lc.faults.degraded is not None
    finally:
        full_disk.free()
    wait_for(lambda: lc.faults.degraded is None, timeout=10, what="the state to end")
    assert events == ["quarantine_disk_full", "quarantine_disk_ok"]
    assert [p.name for p in (full_disk.path / "quarantine").rglob(".tmp-*")] == []
    lc.close()
