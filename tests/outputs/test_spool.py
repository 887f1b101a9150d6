"""The disk spool: order, acknowledgement across restarts, torn records, full policies."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from cdml_edge.outputs.mqtt.spool import RecordTooLarge, Spool, SpoolError
from cdml_edge.outputs.mqtt.spool_format import HEADER_SIZE, SpoolRecord, parse_records


def _recs(start: int, n: int, size: int = 40) -> list[SpoolRecord]:
    return [
        SpoolRecord("cam1/result", f"{i:08d}".encode() + b"x" * size, 1, i % 7 == 0)
        for i in range(start, start + n)
    ]


def _drain(spool: Spool, ack: bool = True) -> list[SpoolRecord]:
    out: list[SpoolRecord] = []
    while True:
        batch = spool.read(50)
        if not batch:
            return out
        for token, rec in batch:
            out.append(rec)
            if ack:
                spool.ack(token)


def test_records_come_back_in_order_with_topic_qos_retain(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=2048)
    recs = _recs(0, 300)
    assert spool.append(recs) == 300
    assert spool.stats()["spool_segments"] > 5  # really spans several segment files
    assert _drain(spool) == recs
    assert spool.pending == 0
    spool.commit()
    # fully acknowledged sealed segments are deleted from disk
    assert len(list(tmp_path.glob("*.seg"))) == 1
    spool.close()


def test_acknowledged_records_are_not_sent_again_after_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    recs = _recs(0, 200)
    spool.append(recs)
    got = spool.read(120)
    for token, _ in got:
        spool.ack(token)
    spool.commit()
    spool._abandon()  # no close(): the process dies here (kill -9 keeps what was flushed)
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    assert again.pending == 80
    assert _drain(again) == recs[120:]
    again.close()


def test_unacknowledged_records_are_sent_again_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    recs = _recs(0, 50)
    spool.append(recs)
    batch = spool.read(30)
    for token, _ in batch[:10]:
        spool.ack(token)
    for token, _ in batch[15:]:  # acked out of order: cursor stays at record 10
        spool.ack(token)
    spool.rewind()
    assert [r for r in _drain(spool)] == recs[10:]
    spool.close()


def test_torn_last_record_is_skipped_and_never_crashes(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync="never")
    recs = _recs(0, 20)
    spool.append(recs)
    spool.close()
    (seg,) = tmp_path.glob("*.seg")
    data = seg.read_bytes()
    # power loss in the middle of the last record
    seg.write_bytes(data[: len(data) - 17])
    again = Spool(tmp_path, max_bytes=1 << 20)
    assert again.pending == 19
    assert _drain(again) == recs[:19]
    assert again.corrupt_skipped == 1
    # the reopened spool appends to a fresh segment and both are read
    again.append(_recs(100, 3))
    assert _drain(again) == _recs(100, 3)
    again.close()


def test_corrupt_record_in_the_middle_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    recs = _recs(0, 10)
    spool.append(recs)
    spool.close()
    (seg,) = tmp_path.glob("*.seg")
    data = bytearray(seg.read_bytes())
    rec_len = len(recs[0].encode())
    data[3 * rec_len + HEADER_SIZE + 5] ^= 0xFF  # flip a payload byte of record 3
    seg.write_bytes(bytes(data))
    again = Spool(tmp_path, max_bytes=1 << 20)
    assert _drain(again) == recs[:3] + recs[4:]
    assert again.corrupt_skipped == 1
    again.close()


def test_garbage_file_does_not_crash_the_parser() -> None:
    junk = os.urandom(5000) + b"CDSP" + b"\xff" * 20 + b"CDSP"
    spans = list(parse_records(junk))
    assert all(body is None for _, _, body in spans)
    assert spans[-1][1] == len(junk)


def test_drop_oldest_counts_exactly_what_is_missing(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=8192, policy="drop_oldest")
    recs = _recs(0, 1000)
    for i in range(0, 1000, 10):
        assert spool.append(recs[i : i + 10]) == 10
        assert spool.size_bytes <= 8192
    got = _drain(spool)
    assert spool.dropped > 0
    assert spool.dropped + len(got) == 1000
    # what survived is the newest, contiguous, in order
    assert got == recs[1000 - len(got) :]
    spool.close()


def test_drop_oldest_does_not_count_records_already_sent(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=8192, policy="drop_oldest")
    recs = _recs(0, 100)
    spool.append(recs[:40])
    sent = spool.read(40)  # handed to the broker, not yet acknowledged
    spool.append(_recs(100, 400))
    rest = _drain(spool)
    assert spool.dropped + len(rest) == 400
    assert len(sent) == 40
    spool.close()


def test_block_policy_waits_for_room_and_loses_nothing(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=8192, policy="block")
    recs = _recs(0, 600)
    done = threading.Event()

    def writer() -> None:
        for i in range(0, 600, 20):
            spool.append(recs[i : i + 20])
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    got: list[SpoolRecord] = []
    deadline = time.monotonic() + 30
    while (not done.is_set() or spool.unread()) and time.monotonic() < deadline:
        assert spool.size_bytes <= 8192
        for token, rec in spool.read(7):
            got.append(rec)
            spool.ack(token)
        time.sleep(0.001)
    thread.join(5)
    got += _drain(spool)
    assert got == recs
    assert spool.dropped == 0
    spool.close()


def test_block_policy_without_wait_returns_what_fit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096, policy="block")
    n = spool.append(_recs(0, 200), wait=False)
    assert 0 < n < 200
    assert spool.size_bytes <= 4096
    assert spool.append(_recs(0, 1), timeout=0.05) == 0
    spool.close()


def test_record_larger_than_the_spool_is_refused(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096)
    with pytest.raises(RecordTooLarge, match="spool.max_bytes"):
        spool.append([SpoolRecord("t", b"x" * 5000)])
    spool.close()


def test_one_process_per_spool_folder(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096)
    with pytest.raises(SpoolError, match="in use"):
        Spool(tmp_path, max_bytes=4096)
    spool.close()
    Spool(tmp_path, max_bytes=4096).close()


@pytest.mark.timeout(30)
def test_a_multi_mib_garbage_segment_recovers_in_linear_work(tmp_path: Path) -> None:
    # one bad record every 4 bytes: a rescan of the rest per skip would take minutes
    good = _recs(0, 2)
    garbage = b"CDSP" * (1024 * 1024)  # 4 MiB of magics whose length field is impossible
    (tmp_path / "000000000003.seg").write_bytes(good[0].encode() + garbage + good[1].encode())
    spool = Spool(tmp_path, max_bytes=64 << 20, fsync="never")
    assert spool.pending == 2
    assert _drain(spool) == good
    assert spool.corrupt_skipped == 1024 * 1024
    spool.close()


def test_a_segment_larger_than_the_spool_bound_is_set_aside_unread(tmp_path: Path) -> None:
    big = tmp_path / "000000000002.seg"
    big.write_bytes(os.urandom(300_000))
    spool = Spool(tmp_path, max_bytes=200_000, fsync="never")
    assert spool.pending == 0
    assert spool.stats()["spool_segments_set_aside"] == 1
    assert (tmp_path / "000000000002.seg.bad").stat().st_size == 300_000
    spool.append(_recs(0, 3))
    assert _drain(spool) == _recs(0, 3)
    spool.close()


def test_a_folder_named_like_a_segment_is_set_aside_and_the_spool_starts(tmp_path: Path) -> None:
    first = Spool(tmp_path, max_bytes=1 << 20, fsync="never")
    first.append(_recs(0, 4))
    first.close()
    (tmp_path / "000000000007.seg").mkdir()
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync="never")
    assert spool.stats()["spool_segments_set_aside"] == 1
    assert (tmp_path / "000000000007.seg.bad").is_dir()
    spool.append(_recs(10, 2))  # a new segment after the set-aside id, no collision
    assert _drain(spool) == _recs(0, 4) + _recs(10, 2)
    spool.close()
