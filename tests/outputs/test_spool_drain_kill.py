"""kill -9 in the middle of a spool drain never sends the whole drained backlog again.

Only the slice acknowledged since the last cursor write (at most ``COMMIT_EVERY`` records, or
0.2 s) plus what was in flight is sent again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, wait_until
from helpers.paths import HELPERS
from helpers.ports import free_port

from cdml_edge.outputs.mqtt.publisher import COMMIT_EVERY

IN_FLIGHT = 64


def _proc(cfg: dict, path: Path) -> subprocess.Popen[str]:  # type: ignore[type-arg]
    path.write_text(json.dumps(cfg))
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "mqtt_publisher_proc.py"), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.slow  # a publisher process killed -9 half way, then a second one draining
def test_kill_9_during_the_drain_resends_only_the_last_slice(tmp_path: Path) -> None:
    n = 20_000
    broker = BrokerProcess(tmp_path / "broker").start()
    prefix = f"d{uuid.uuid4().hex[:8]}"
    sub = Subscriber(broker.port, f"{prefix}/#")
    base = {
        "prefix": prefix,
        "device": "edge-1",
        "spool": str(tmp_path / "spool"),
        "protocol": broker.protocol,
    }
    try:
        fill = _proc(
            {**base, "url": f"mqtt://127.0.0.1:{free_port()}", "count": n, "then": "wait"},
            tmp_path / "fill.json",
        )
        assert fill.stdout is not None and fill.stdout.readline().startswith(f"durable {n}")
        fill.kill()
        fill.wait(10)
        drain = _proc(
            {**base, "url": broker.url, "count": 0, "then": "drain", "progress": True},
            tmp_path / "drain.json",
        )
        assert drain.stdout is not None
        assert drain.stdout.readline().startswith("durable 0")
        for line in drain.stdout:  # the publisher's own view: half the backlog acknowledged
            if line.startswith("pending ") and int(line.split()[1]) <= n // 2:
                break
        os.kill(drain.pid, signal.SIGKILL)  # in the middle of the drain
        drain.wait(10)
        again = _proc(
            {**base, "url": broker.url, "count": 0, "then": "drain"}, tmp_path / "again.json"
        )
        assert again.stdout is not None
        pending = json.loads(again.stdout.readline().split(" ", 2)[2])["spool_records"]
        assert 0 < pending <= n // 2 + COMMIT_EVERY + 2 * IN_FLIGHT  # killed mid-drain
        assert "drained" in again.stdout.readline()
        assert again.wait(60) == 0
        assert wait_until(lambda: len(set(sub.ids())) == n, 60)
        time.sleep(0.5)
        resent = len(sub.ids()) - n
        print(
            f"[kill -9 mid-drain] {n - pending} of {n} acknowledged as far as the cursor "
            f"says, {pending} sent again, {resent} of them twice"
        )
        assert resent <= COMMIT_EVERY + 2 * IN_FLIGHT, resent
    finally:
        sub.close()
        broker.stop()
