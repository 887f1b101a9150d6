"""kill -9 the real agent (``cdml-edge run``) with a non-empty spool; on restart it drains.

A Mosquitto on a free loopback port the test controls is down while the agent scores files:
their results go to the spool, and only then are the files deleted (``on_durable``). The
agent is killed with SIGKILL (no drain, no clean spool close), the broker comes back, the
agent starts again, and every result id reaches a subscriber that was subscribed before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier
from helpers.mqtt_brokers import BrokerProcess, Subscriber, wait_until

from cdml_edge.window.payloads import item_id

N_FILES = 6


def _config(tmp_path: Path, broker: BrokerProcess, prefix: str) -> Path:
    brightness_classifier(tmp_path / "brightness.onnx")
    text = f"""
    device: {{id: edge-k9}}
    sources:
      - name: cam
        path: in/cam
        modality: image
        window: {{seconds: 50ms, max_items: 2}}
        on_done: delete
        stable_seconds: 0.1
    models:
      image: {{path: brightness.onnx}}
    quarantine: {{dir: quarantine}}
    mqtt: {{url: "{broker.url}", topic_prefix: {prefix}, protocol: "{broker.protocol}"}}
    spool: {{dir: spool, fsync: always}}
    output: {{jsonl: null}}
    health: {{interval: 1s}}
    """
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(textwrap.dedent(text))
    return cfg


def _agent(cfg: Path) -> subprocess.Popen[bytes]:
    log = open(cfg.parent / "agent.log", "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg)],
            cwd=cfg.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def _spooled(spool: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(spool.rglob("*")) if p.is_file())


@pytest.mark.broker
@pytest.mark.slow
def test_agent_kill_9_with_spooled_results_drains_after_restart(tmp_path: Path) -> None:
    prefix = f"k9{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "broker")
    broker.start()
    sub = Subscriber(broker.port, f"{prefix}/#", client_id=f"sub-{prefix}")
    broker.stop()  # Mosquitto keeps the subscriber's session for when it is back
    cfg = _config(tmp_path, broker, prefix)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    by_name: dict[str, str] = {}
    for n in range(N_FILES):
        p = cam / f"f{n}.jpg"
        p.write_bytes(jpeg(40 * n))
        st = p.stat()
        by_name[p.name] = item_id("cam", p.name, st.st_size, st.st_mtime_ns, content=jpeg(40 * n))
    expected = set(by_name.values())
    spool = tmp_path / "spool"
    first = _agent(cfg)
    try:
        # a file goes only once its result is durable: each deleted file's id is in the spool
        deleted_unspooled: list[str] = []

        def all_deleted_after_spooling() -> bool:
            left = {p.name for p in cam.iterdir()}
            data = _spooled(spool) if spool.exists() else b""
            for name, rid in by_name.items():
                if name not in left and rid.encode() not in data:
                    deleted_unspooled.append(name)
            return not left

        assert wait_until(all_deleted_after_spooling, 90), (tmp_path / "agent.log").read_text()
        assert deleted_unspooled == [], deleted_unspooled
        assert sub.ids() == []  # the broker is down: nothing was delivered yet
        spooled = _spooled(spool)
        assert all(i.encode() in spooled for i in expected)
    finally:
        os.kill(first.pid, signal.SIGKILL)  # no drain, no clean close of the spool
        first.wait(10)
    assert first.returncode == -signal.SIGKILL

    broker.start()
    second = _agent(cfg)
    try:
        got = wait_until(lambda: expected <= set(sub.ids()), 90)
        log = (tmp_path / "agent.log").read_text(errors="replace")
        assert got, (sorted(set(sub.ids())), log[-3000:])
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(60)
        sub.close()
        broker.stop()
    assert code == 0
    assert set(sub.ids()) == expected  # nothing else, and nothing lost
    assert list(cam.iterdir()) == []
