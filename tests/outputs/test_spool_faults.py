"""The spool on a full disk.

Nothing half-written, a degraded state with one event per episode, paced retries, and recovery
by itself once space returns.
"""

from __future__ import annotations

import time

from helpers.full_disk import FullDisk

import cdml_edge.outputs.mqtt.spool as spool_mod
from cdml_edge.outputs.mqtt.spool import Spool
from cdml_edge.outputs.mqtt.spool_format import SpoolRecord


def _recs(start: int, n: int, size: int = 200) -> list[SpoolRecord]:
    return [
        SpoolRecord("cam1/result", f"r{i:05d}".encode() + b"x" * size)
        for i in range(start, start + n)
    ]


def _ids(sp: Spool) -> list[str]:
    out = []
    while True:
        got = sp.read(64)
        if not got:
            return out
        for token, rec in got:
            out.append(rec.payload[:6].decode())
            sp.ack(token)


def test_full_disk_undoes_the_batch_reports_once_and_recovers(full_disk: FullDisk) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    events: list[str] = []
    sp = Spool(
        full_disk.path / "spool",
        1024**2,
        fsync="batch",
        on_event=lambda kind, info: events.append(kind),
        retry_s=0.2,
    )
    assert sp.append(_recs(0, 10)) == 10
    full_disk.fill()
    assert sp.append(_recs(10, 50)) == 0  # not one of them is reported safe
    assert sp.faults.degraded is not None and "append" in sp.faults.degraded
    assert sp.stats()["spool_degraded"] == 1
    errors = sp.faults.errors
    assert sp.append(_recs(10, 50)) == 0  # within retry_s: not even tried
    assert sp.faults.errors == errors
    time.sleep(0.25)
    assert sp.append(_recs(10, 50)) == 0  # tried again, still full
    assert sp.faults.errors == errors + 1
    assert events == ["spool_disk_full"]  # once per episode
    full_disk.free()
    time.sleep(0.25)
    assert sp.append(_recs(10, 50)) == 50
    assert events == ["spool_disk_full", "spool_disk_ok"]
    assert sp.stats()["spool_degraded"] == 0
    assert _ids(sp) == [f"r{i:05d}" for i in range(60)]  # in order, nothing twice
    assert sp.corrupt_skipped == 0
    sp.close()
    again = Spool(full_disk.path / "spool", 1024**2)
    assert again.pending == 0 and again.corrupt_skipped == 0
    again.close()


def test_records_written_before_the_disk_filled_survive_a_restart(full_disk: FullDisk) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    sp = Spool(full_disk.path / "spool", 1024**2, retry_s=0.05)
    assert sp.append(_recs(0, 20)) == 20
    token_batches = sp.read(5)
    for token, _ in token_batches:
        sp.ack(token)
    full_disk.fill()
    assert sp.append(_recs(20, 200)) == 0
    sp.commit()  # the cursor cannot be written either: stays dirty, no exception
    assert "commit" in (sp.faults.degraded or "")
    sp._abandon()  # as a crash would
    # nothing of the abandoned spool goes on: its disk probe would write beside the next one
    # (and re-arm itself for as long as the process lives)
    assert sp.faults._timer is None
    full_disk.free()
    again = Spool(full_disk.path / "spool", 1024**2)
    ids = _ids(again)
    # the 15 not acknowledged come back (the 5 acknowledged too: the cursor never landed)
    assert ids == [f"r{i:05d}" for i in range(20)]
    assert again.corrupt_skipped == 0
    again.close()


def test_an_append_that_is_not_tried_again_does_not_leave_the_spool_degraded(
    full_disk: FullDisk,
) -> None:
    """The broker came back before the spool was written again: no append heals the state.

    So the spool probes its disk (a small write) every retry_s until it works.
    """
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    events: list[str] = []
    sp = Spool(
        full_disk.path / "spool",
        1024**2,
        retry_s=0.05,
        on_event=lambda kind, info: events.append(kind),
    )
    full_disk.fill()
    assert sp.append(_recs(0, 5)) == 0
    time.sleep(0.3)  # probes while full fail quietly: still one event, still degraded
    assert events == ["spool_disk_full"] and sp.faults.degraded is not None
    full_disk.free()
    deadline = time.monotonic() + 5
    while sp.faults.degraded is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sp.faults.degraded is None and events == ["spool_disk_full", "spool_disk_ok"]
    assert (
        sorted(p.name for p in (full_disk.path / "spool").iterdir() if p.name.startswith(".")) == []
    )  # the probe leaves nothing behind
    sp.close()
