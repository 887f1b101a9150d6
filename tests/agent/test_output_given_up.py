"""A window whose message the broker can never take: its files stay, nothing waits on it.

The broker announces a Maximum Packet Size (MQTT 5) smaller than a 16-item window message.
The publisher gives the message up; before, the window was never finished: the pipeline
counted it in flight for ever, the progress watchdog called the agent stalled (under
systemd, a restart that scores the same files again) and a stop waited out its drain.
"""

from __future__ import annotations

import signal
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, start_agent, wait_for, write_atomic
from helpers.models import brightness_classifier
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary

pytestmark = pytest.mark.skipif(mosquitto_binary() is None, reason="needs Mosquitto")


def test_a_window_too_large_for_the_broker_is_given_up_and_its_files_kept(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "broker", max_packet_size=2048).start()
    prefix = f"gu{uuid.uuid4().hex[:8]}"
    sub = Subscriber(broker.port, f"{prefix}/#")
    brightness_classifier(tmp_path / "b.onnx")
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        textwrap.dedent(f"""
        device: {{id: giveup}}
        sources:
          - name: cam
            path: in/cam
            modality: image
            on_done: delete
            stable_seconds: 0.1
            window: {{seconds: 1s, max_items: 16, close_when_idle: false}}
        models: {{image: {{path: b.onnx}}}}
        mqtt: {{url: "{broker.url}", protocol: "5", topic_prefix: {prefix}, results: window}}
        health: {{interval: 0.3s, watchdog: false, stall_after: 2s}}
    """)
    )
    log = tmp_path / "agent.log"
    proc = start_agent(cfg, log, cwd=tmp_path)
    try:
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        big = [f"big-{i:02d}.jpg" for i in range(16)]
        for name in big:
            write_atomic(cam / name, jpeg(8 * len(name) + 40))
        wait_for(lambda: "gave up on its messages" in log.read_text(), what="given up")
        time.sleep(3.0)  # past stall_after: a window left in flight would be a stall
        assert sorted(p.name for p in cam.iterdir()) == big  # kept, not deleted
        write_atomic(cam / "small.jpg", jpeg(200))
        wait_for(lambda: not (cam / "small.jpg").exists(), timeout=20, what="small finished")
        wait_for(lambda: sub.on("/cam/window") != [], what="the small window delivered")
        time.sleep(2.0)  # the big files are not taken again
        assert sorted(p.name for p in cam.iterdir()) == big
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert time.monotonic() - started < 8  # no drain waited out for the given-up window
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sub.close()
        broker.stop()
    said = log.read_text()
    assert "stalled" not in said, said[-3000:]
    assert said.count("gave up on its messages") == 1, said[-3000:]
