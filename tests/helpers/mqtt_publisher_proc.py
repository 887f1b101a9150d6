"""A publisher process for the crash tests: ``python mqtt_publisher_proc.py CONFIG.json``.

It publishes ``count`` results (ids ``r{start+i}``) through :class:`MqttPublisher` with a disk
spool, prints ``durable N`` once every batch is acknowledged or spooled, then either waits to
be killed (``"then": "wait"``) or until the spool has drained (``"then": "drain"``; with
``"progress": true`` it prints ``pending N`` as the spool empties). ``"format": "sparkplug_b"``
publishes them as Sparkplug B (group: the prefix).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    session = None
    if cfg.get("format") == "sparkplug_b":
        from cdml_edge.outputs.sparkplug.node import SparkplugNode

        session = SparkplugNode(cfg["prefix"], cfg["device"], ["cam1"], Path(cfg["spool"] + ".bd"))
    pub = MqttPublisher(
        MqttConfig(
            url=cfg["url"],
            topic_prefix=cfg["prefix"],
            keepalive=cfg.get("keepalive", 2),
            protocol=cfg.get("protocol", "5"),
        ),
        cfg["device"],
        SpoolConfig(dir=cfg["spool"], max_bytes=cfg.get("spool_bytes", 64 * 1024**2)),
        backoff_max=1.0,
        session=session,
    )
    out: Output = pub
    if session is not None:
        from cdml_edge.outputs.sparkplug.output import SparkplugOutput

        out = SparkplugOutput(pub, session)
    out.start()
    if cfg.get("wait_connected"):
        while not pub.connected:
            time.sleep(0.02)
    done = threading.Semaphore(0)
    batches = 0
    start, count = cfg.get("start", 0), cfg.get("count", 0)
    for base in range(start, start + count, 10):
        msgs = [
            OutMessage("cam1/result", json.dumps({"id": f"r{i}", "seq": i}).encode())
            for i in range(base, min(base + 10, start + count))
        ]
        out.publish_batch(msgs, done.release)
        batches += 1
    for _ in range(batches):
        done.acquire()
    print(f"durable {count}", json.dumps(pub.stats()), flush=True)
    if cfg.get("then") == "drain":
        shown = -1
        while pub.stats()["spool_records"] or pub.stats()["inflight"] or not pub.connected:
            left = pub.stats()["spool_records"]
            if cfg.get("progress") and left != shown:
                print(f"pending {left}", flush=True)  # the drain as the publisher sees it
                shown = left
            time.sleep(0.02)
        out.stop()
        print("drained", json.dumps(pub.stats()), flush=True)
        return
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
