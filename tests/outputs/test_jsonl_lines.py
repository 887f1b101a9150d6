"""The JSON-lines output on disks that fill up and under agents that get killed.

Every line of the file must be one JSON document, whatever happened to the writer: a write
refused half way by the kernel (a full disk: here a real file-size limit, which fails a
write exactly like ENOSPC does, after the bytes that fit), a process killed in the middle of
a line. And the output's counters and the agent's health must say what really happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.mqtt_brokers import Subscriber, broker_protocol, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.factory import degraded_parts
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.outputs.tee import TeeOutput
from cdml_edge.window.topics import OutMessage


def _msg(i: int, pad: int = 300) -> OutMessage:
    doc = {"id": f"r{i:06d}", "pad": "x" * pad}
    return OutMessage("cam1/result", json.dumps(doc).encode())


def _ids(path: Path) -> list[str]:
    """The result ids of the file, every line parsed (a torn line fails the test)."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line)["payload"]["id"] for line in data.splitlines()]


# A writer that fills its disk: RLIMIT_FSIZE makes the kernel write what fits of a write()
# and fail the rest with EFBIG, as a full disk does with ENOSPC. It then dies by SIGKILL.
_FILLER = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from cdml_edge.outputs.jsonl import JsonlOutput
    from cdml_edge.window.topics import OutMessage
    path, limit = sys.argv[1], int(sys.argv[2])
    out = JsonlOutput(path)
    out.start()
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    ok, i = [], 0
    while True:
        batch = [f"r{i + k:06d}" for k in range(2)]
        msgs = [OutMessage("cam1/result", json.dumps({"id": b, "pad": "x" * 300}).encode())
                for b in batch]
        try:
            out.publish_batch(msgs)
        except OSError:
            break
        ok += batch
        i += 2
    with open(path, "rb") as fh:  # what is on disk now, before anything else is written
        tail = fh.read()[-1:]
    print(json.dumps({"ok": ok, "tail": tail.decode("latin-1")}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _fill(path: Path, limit: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _FILLER, str(path), str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr
    seen: dict[str, Any] = json.loads(proc.stdout)
    return seen


def test_a_write_refused_half_way_by_a_full_disk_leaves_no_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "out" / "results.jsonl"
    seen = _fill(path, 5000)
    assert seen["ok"], "the disk was full from the first batch"
    assert seen["tail"] == "\n"  # on disk right after the refused write: no torn line
    assert _ids(path) == seen["ok"]  # the refused batch is not there, not even in part


def test_a_line_torn_by_a_killed_writer_is_cut_before_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    whole = '{"topic":"cdml/edge-1/cam1/result","retain":false,"payload":{"id":"r000000"}}\n'
    path.write_bytes(whole.encode() + b'{"topic":"cdml/edge-1/cam1/result","retain":fa')
    out = JsonlOutput(path)
    out.start()
    out.publish_batch([_msg(1), _msg(2)])
    out.stop()
    assert _ids(path) == ["r000000", "r000001", "r000002"]


def test_after_a_full_disk_and_a_kill_the_next_agent_writes_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    seen = _fill(path, 7000)
    out = JsonlOutput(path)
    out.start()
    out.publish_batch([_msg(900_000)])
    out.stop()
    assert _ids(path) == [*seen["ok"], "r900000"]


def test_bytes_written_counts_what_this_run_wrote_and_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"old":1}\n' * 1000)  # a previous run's 10,000 bytes
    out = JsonlOutput(path, max_bytes=12_000)
    out.start()
    assert out.stats()["bytes_written"] == 0
    seen = []
    for i in range(20):
        out.publish_batch([_msg(i)])
        seen.append(out.stats()["bytes_written"])
    out.stop()
    assert (path.parent / "results.jsonl.1").exists()  # rotated on the way
    assert seen == sorted(seen) and seen[0] > 0
    new_bytes = (path.parent / "results.jsonl.1").stat().st_size - 10_000 + path.stat().st_size
    assert seen[-1] == new_bytes  # every byte this run put on the disk, nothing else


def test_tee_a_failing_jsonl_beside_a_working_broker_is_degraded_and_nothing_is_lost(
    tmp_path: Path, broker_port: int
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    prefix = f"tee{uuid.uuid4().hex[:8]}"
    sub = Subscriber(broker_port, f"{prefix}/#", persistent=False)
    mqtt = MqttPublisher(
        MqttConfig(
            url=f"mqtt://127.0.0.1:{broker_port}",
            topic_prefix=prefix,
            protocol=broker_protocol(),
            client_id=f"{prefix}-pub",
        ),
        "edge-1",
        SpoolConfig(dir=tmp_path / "spool"),
    )
    jsonl = JsonlOutput("/dev/full")  # every write: ENOSPC, a disk that stays full
    tee = TeeOutput([mqtt, jsonl])
    tee.start()
    try:
        assert wait_until(lambda: mqtt.connected, 10)
        durable: list[int] = []
        given_up: list[int] = []
        tee.publish_batch(  # held for the file
            [_msg(1), _msg(2)], lambda: durable.append(1), lambda: given_up.append(1)
        )
        assert wait_until(lambda: len(sub.ids()) == 2, 10)  # the broker got them
        assert wait_until(lambda: mqtt.stats()["acked"] == 2, 10)
        assert durable == []  # not durable in the file: the source files stay
        assert "jsonl" in degraded_parts(tee), degraded_parts(tee)
        assert "/dev/full" in degraded_parts(tee)["jsonl"]
        assert tee.stats()["failed"] == 2
        with pytest.raises(OSError):  # a new window waits: refused as a whole
            tee.publish_batch([_msg(3)], lambda: durable.append(3))
        tee.stop()
        assert durable == [] and given_up == [1]  # given up at stop: its files stay
        assert tee.held == 0
        assert sorted(sub.ids()) == ["r000001", "r000002"]  # each once, and not the new one
    finally:
        tee.stop()
        sub.close()


def test_tee_a_window_one_part_refused_goes_again_to_that_part_alone(
    tmp_path: Path, broker_port: int
) -> None:
    """The file's disk is full (a link to ``/dev/full``), then has room (a regular file).

    The broker gets each message once, the file gets the same messages once, on_durable
    fires once; health and other batches without callbacks are not held.
    """
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    prefix = f"tee{uuid.uuid4().hex[:8]}"
    sub = Subscriber(broker_port, f"{prefix}/#", persistent=False)
    mqtt = MqttPublisher(
        MqttConfig(
            url=f"mqtt://127.0.0.1:{broker_port}",
            topic_prefix=prefix,
            protocol=broker_protocol(),
            client_id=f"{prefix}-pub",
        ),
        "edge-1",
        SpoolConfig(dir=tmp_path / "spool"),
    )
    path = tmp_path / "results.jsonl"
    path.symlink_to("/dev/full")
    jsonl = JsonlOutput(path)
    tee = TeeOutput([mqtt, jsonl], retry_s=0.05, retry_max_s=0.1)
    tee.start()
    try:
        assert wait_until(lambda: mqtt.connected, 10)
        durable: list[str] = []
        tee.publish_batch([_msg(1), _msg(2)], lambda: durable.append("w1"))
        health = OutMessage("health", json.dumps({"id": "h1"}).encode())
        with pytest.raises(OSError):  # no callbacks: not held, said
            tee.publish_batch([health])
        assert wait_until(lambda: jsonl.stats()["failed"] >= 8, 10)  # retried 3 times or more
        assert durable == [] and tee.held == 1
        (tmp_path / "room").write_bytes(b"")
        (tmp_path / "room").replace(path)  # room again: a regular file at the path
        assert wait_until(lambda: durable == ["w1"], 10), durable
        tee.publish_batch([_msg(3)], lambda: durable.append("w2"))
        assert wait_until(lambda: durable == ["w1", "w2"], 10), durable
        assert wait_until(lambda: len(sub.ids()) == 3, 10)
    finally:
        tee.stop()
        sub.close()
    assert sorted(sub.ids()) == ["r000001", "r000002", "r000003"]  # each once
    assert _ids(path) == ["r000001", "r000002", "r000003"]
    assert [m["id"] for m in sub.on("/health")] == ["h1"]  # the broker got the health


_RECOVERS = textwrap.dedent(
    """
    import json, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from cdml_edge.outputs.factory import degraded_parts
    from cdml_edge.outputs.jsonl import JsonlOutput
    from cdml_edge.window.topics import OutMessage
    out = JsonlOutput(sys.argv[1])
    out.start()
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))  # the disk is full
    msg = lambda i: OutMessage("cam1/result", json.dumps({"id": i, "pad": "x" * 300}).encode())
    try:
        out.publish_batch([msg("r1")])
    except OSError:
        pass
    full = degraded_parts(out)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
    out.publish_batch([msg("r2")])
    print(json.dumps({"full": full, "freed": degraded_parts(out), "stats": out.stats()}))
    out.stop()
    """
)


def test_the_jsonl_part_is_degraded_while_its_disk_is_full_and_not_after(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", _RECOVERS, str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert str(path) in seen["full"]["jsonl"]
    assert "jsonl" not in seen["freed"]
    assert seen["stats"]["failed"] == 1 and seen["stats"]["messages"] == 1
    assert _ids(path) == ["r2"]  # the refused batch is not there, in full or in part


def test_a_file_moved_away_by_logrotate_is_followed_by_a_new_one(tmp_path: Path) -> None:
    """logrotate's default (``create``) renames the file; the next lines go to a new one."""
    path = tmp_path / "results.jsonl"
    out = JsonlOutput(path)
    out.start()
    out.publish_batch([_msg(1)])
    path.rename(tmp_path / "results.jsonl-20261207")
    out.publish_batch([_msg(2)])
    assert _ids(tmp_path / "results.jsonl-20261207") == ["r000001"]
    assert _ids(path) == ["r000002"]
    path.unlink()  # deleted, by hand or by a shipper that takes whole files
    out.publish_batch([_msg(3)])
    out.stop()
    assert _ids(path) == ["r000003"]
