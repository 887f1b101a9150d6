#!/usr/bin/env python3
"""MQTT benchmark: results/s at QoS 1 with a live subscriber, and the drain rate of a spool.

(a) ``MqttPublisher`` publishes ``--results`` result payloads (~400 B JSON, batches of 50;
    outbox raised to 64 MiB so all of them take the live path, not the spool)
    at QoS 1 to Mosquitto (127.0.0.1:1883 when it is there, else a Mosquitto / embedded
    broker process of our own) while a subscriber receives them. Reported: results/s until
    every batch is PUBACKed (``on_durable``) and until the subscriber has them all.
    Baseline, same run, same broker: a bare paho client (``loop_start``, the same in-flight
    window) publishing the same payloads — the publisher's rate is printed as a ratio of it.
(b) ``--spool`` results (100,000 by default) are spooled while the broker is unreachable;
    then the broker comes back and the spool drains oldest first. Reported: drain rate
    (spool records/s PUBACKed, and received by the subscriber), spool append rate and bytes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

import paho.mqtt.client as mqtt
from _test_helpers import borrow
from timing import rounds

borrow("mqtt_brokers")
from helpers.mqtt_brokers import (  # noqa: E402
    SHARED_PORT,
    BrokerProcess,
    Subscriber,
    free_port,
    mosquitto_binary,
    port_open,
    wait_until,
)

from cdml_edge.config import MqttConfig, OutboxConfig, SpoolConfig  # noqa: E402
from cdml_edge.outputs.mqtt.publisher import MqttPublisher  # noqa: E402
from cdml_edge.window.topics import OutMessage  # noqa: E402

INFLIGHT = 64
MqttProtocol = Literal["5", "3.1.1"]  # MqttConfig.protocol


def payloads(n: int, tag: str) -> list[bytes]:
    out = []
    for i in range(n):
        body = {
            "id": f"{tag}{i:07d}",
            "window_id": "w-1",
            "source": "cam1",
            "item": f"{i}.jpg",
            "modality": "image",
            "ts": 1.7e9 + i,
            "label": "ok",
            "score": 0.97,
            "anomaly": False,
            "anomaly_score": 0.02,
            "latency_ms": 4.5,
            "model": "tier2",
            "model_version": "3",
            "seq": i + 1,
            "device": "edge-1",
            "pad": "x" * 120,
        }
        out.append(json.dumps(body).encode())
    return out


def bench_paho(
    port: int, protocol: MqttProtocol, prefix: str, data: list[bytes]
) -> tuple[float, float]:
    sub = Subscriber(port, f"{prefix}/#", persistent=False)
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=f"{prefix}-raw",
        protocol=mqtt.MQTTv5 if protocol == "5" else mqtt.MQTTv311,
    )
    client.max_inflight_messages_set(INFLIGHT)
    acked = [0]
    client.on_publish = lambda *a: acked.__setitem__(0, acked[0] + 1)
    client.connect("127.0.0.1", port)
    client.loop_start()
    wait_until(client.is_connected, 10)
    t0 = time.perf_counter()
    for p in data:
        client.publish(f"{prefix}/edge-1/cam1/result", p, qos=1)
    wait_until(lambda: acked[0] >= len(data), 300, 0.001)
    t_ack = time.perf_counter() - t0
    wait_until(lambda: len(sub.messages) >= len(data), 300, 0.01)
    t_sub = time.perf_counter() - t0
    client.loop_stop()
    client.disconnect()
    sub.close()
    return len(data) / t_ack, len(data) / t_sub


def bench_publisher(
    port: int, protocol: MqttProtocol, prefix: str, data: list[bytes], spool: Path
) -> tuple[float, float]:
    sub = Subscriber(port, f"{prefix}/#", persistent=False)
    pub = MqttPublisher(
        MqttConfig(url=f"mqtt://127.0.0.1:{port}", topic_prefix=prefix, protocol=protocol),
        "edge-1",
        SpoolConfig(dir=spool),
        OutboxConfig(max_bytes=64 * 1024**2),
        max_inflight=INFLIGHT,
    )
    pub.start()
    wait_until(lambda: pub.connected, 10)
    sem = threading.Semaphore(0)
    batches = 0
    t0 = time.perf_counter()
    for i in range(0, len(data), 50):
        pub.publish_batch([OutMessage("cam1/result", p) for p in data[i : i + 50]], sem.release)
        batches += 1
    for _ in range(batches):
        sem.acquire()
    t_ack = time.perf_counter() - t0
    wait_until(lambda: len(sub.messages) >= len(data), 300, 0.01)
    t_sub = time.perf_counter() - t0
    spooled = pub.stats()["spooled"]
    pub.stop()
    sub.close()
    if spooled:
        print(f"   (note: {spooled} results overflowed to the spool: the broker was slower)")
    return len(data) / t_ack, len(data) / t_sub


def bench_drain(n: int, workdir: Path) -> dict[str, float]:
    broker = BrokerProcess(workdir / "broker", port=free_port())
    prefix = f"bench{int(time.time())}d"
    broker.start()
    sub = Subscriber(broker.port, f"{prefix}/#", client_id=f"{prefix}-sub")
    broker.stop()
    data = payloads(n, "d")
    pub = MqttPublisher(
        MqttConfig(url=broker.url, topic_prefix=prefix, protocol=broker.protocol),
        "edge-1",
        SpoolConfig(dir=workdir / "spool", max_bytes=512 * 1024**2),
        max_inflight=INFLIGHT,
        backoff_max=0.5,
    )
    pub.start()
    t0 = time.perf_counter()
    for i in range(0, n, 100):
        pub.publish_batch([OutMessage("cam1/result", p) for p in data[i : i + 100]])
    t_spool = time.perf_counter() - t0
    stats = pub.stats()
    assert stats["spool_records"] == n, stats
    broker.start()
    wait_until(lambda: pub.connected, 20, 0.001)
    t1 = time.perf_counter()
    wait_until(lambda: pub.stats()["spool_records"] == 0, 600, 0.005)
    t_drain = time.perf_counter() - t1
    wait_until(lambda: len(sub.messages) >= n, 600, 0.01)
    t_recv = time.perf_counter() - t1
    got = len({m["id"] for m in sub.on("/result")})
    pub.stop()
    sub.close()
    broker.stop()
    return {
        "append_per_s": n / t_spool,
        "spool_mib": stats["spool_bytes"] / 1024**2,
        "drain_per_s": n / t_drain,
        "recv_per_s": n / t_recv,
        "unique": got,
        "broker": broker.kind,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", type=int, default=20000)
    ap.add_argument("--spool", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs of (a); best kept")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        own: BrokerProcess | None = None
        protocol: MqttProtocol
        if mosquitto_binary() and port_open(SHARED_PORT):
            port, kind, protocol = SHARED_PORT, "mosquitto 127.0.0.1:1883", "5"
        else:
            own = BrokerProcess(work / "live").start()
            port, kind, protocol = own.port, own.kind, own.protocol
        data = payloads(args.results, "l")
        tag = f"bench{int(time.time())}"
        run = itertools.count()  # each run its own topics (and spool)
        runs = rounds(
            {  # alternate, so both see the same machine load
                "paho": lambda: bench_paho(port, protocol, f"{tag}r{next(run)}", data),
                "pub": lambda: bench_publisher(
                    port, protocol, f"{tag}p{next(run)}", data, work / f"spool-live{next(run)}"
                ),
            },
            args.repeat,
        )
        # the best rate of each (acked, received) over the runs
        raw_ack, raw_sub = (max(r[i] for r in runs["paho"]) for i in (0, 1))
        pub_ack, pub_sub = (max(r[i] for r in runs["pub"]) for i in (0, 1))
        if own is not None:
            own.stop()
        print(
            f"(a) QoS 1, {args.results} results of ~{len(data[0])} B, broker: {kind}, "
            f"MQTT {protocol}, in-flight {INFLIGHT}, best of {args.repeat}"
        )
        print(f"    {'':24}{'PUBACKed/s':>12}{'received/s':>12}")
        print(f"    {'bare paho (baseline)':24}{raw_ack:12,.0f}{raw_sub:12,.0f}")
        print(f"    {'MqttPublisher':24}{pub_ack:12,.0f}{pub_sub:12,.0f}")
        print(
            f"    ratio publisher / paho: {pub_ack / raw_ack:.2f} (acked), "
            f"{pub_sub / raw_sub:.2f} (received)"
        )
        d = bench_drain(args.spool, work)
        print(
            f"(b) spool of {args.spool:,} results ({d['spool_mib']:.1f} MiB), broker: {d['broker']}"
        )
        print(
            f"    spool append (broker down, fsync per batch of 100): "
            f"{d['append_per_s']:,.0f} results/s"
        )
        print(
            f"    drain after reconnect: {d['drain_per_s']:,.0f} results/s PUBACKed, "
            f"{d['recv_per_s']:,.0f} results/s received; unique ids received "
            f"{d['unique']:,} of {args.spool:,}"
        )
        print(f"    drain / live publisher rate: {d['drain_per_s'] / pub_ack:.2f}")


if __name__ == "__main__":
    main()
