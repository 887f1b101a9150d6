#!/usr/bin/env python3
"""Run the demo: embedded broker + subscriber, ``cdml-edge run`` for a bounded time, a report.

1. starts the embedded MQTT broker (amqtt) on a free port and subscribes to ``cdml/#``;
2. runs ``cdml-edge run --config configs/demo.yaml --duration N`` pointed at that broker;
3. once the agent is online, drops the files staged by ``make_demo_data.py`` into the
   watched folders (a rename each, like a careful uploader), a few per second;
4. when the agent has drained and exited, prints what the subscriber received: results
   per source scored against ``truth.json``, the error events (quarantined inputs), the
   window and health messages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from rich.console import Console
from rich.table import Table

from cdml_edge.outputs.mqtt.embedded_broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("digits.onnx", "audio_anomaly.onnx", "vibration_anomaly.onnx")


class Subscriber:
    """Collects every message below ``prefix/#``."""

    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.online = threading.Event()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id="demo-subscriber", protocol=mqtt.MQTTv311
        )
        self.client.on_message = self._on_message
        self.client.connect(host, port)
        self.client.subscribe(f"{prefix}/#", qos=1)
        self.client.loop_start()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            return
        with self._lock:
            self.messages.append((msg.topic, payload))
        if msg.topic.endswith("/status") and payload.get("state") == "online":
            self.online.set()

    def of(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return [(t, p) for t, p in self.messages if t.endswith("/" + kind)]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def feed(demo: Path, rate: float) -> int:
    """Move staged files into the watched folders, ``rate`` files per second in all."""
    staged = sorted((demo / "stage").glob("*/*"))
    period = 1.0 / rate
    for n, src in enumerate(staged):
        dest = demo / "in" / src.parent.name / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)
        if n + 1 < len(staged):
            time.sleep(period)
    return len(staged)


def report(sub: Subscriber, truth: dict[str, dict[str, str]], console: Console) -> int:
    results = sub.of("result")
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, p in results:
        by_source[p["source"]].append(p)

    table = Table(title="What the subscriber received (cdml/demo-laptop/<source>/result)")
    for col in ("source", "results", "labels / anomalies", "agrees with truth", "p50 latency"):
        table.add_column(col)
    for source in sorted(by_source):
        rs = by_source[source]
        lat = sorted(r["latency_ms"] for r in rs)
        labels = Counter(str(r["label"]) for r in rs)
        known = truth.get(source, {})
        if source == "cam-live":  # frames are named by capture time: match them by order
            rs = sorted(rs, key=lambda r: r["ts"])
            rs = [dict(r, item=f"#{n}") for n, r in enumerate(rs)]
        judged = [r for r in rs if r["item"] in known]
        agree = sum(
            1
            for r in judged
            if known[r["item"]]
            == (
                r["label"]
                if source.startswith("cam")
                else ("anomaly" if r["anomaly"] else "normal")
            )
        )
        table.add_row(
            source,
            str(len(rs)),
            ", ".join(f"{k}:{v}" for k, v in labels.most_common(6)),
            f"{agree}/{len(judged)}" if judged else "-",
            f"{lat[len(lat) // 2]:.0f} ms" if lat else "-",
        )
    console.print(table)

    sample = Table(title="A few results")
    for col in ("topic", "item", "label", "score", "anomaly", "latency_ms", "model"):
        sample.add_column(col)
    shown: set[str] = set()
    for topic, p in results:
        if p["source"] in shown:
            continue
        shown.add(p["source"])
        score = p["anomaly_score"] if p["anomaly_score"] is not None else p["score"]
        sample.add_row(
            topic,
            p["item"],
            str(p["label"]),
            f"{score:.3f}" if score is not None else "-",
            str(p["anomaly"]),
            f"{p['latency_ms']:.1f}",
            p["model"],
        )
    console.print(sample)

    errors = sub.of("error")
    if errors:
        et = Table(title="Error events (bad inputs, moved to quarantine)")
        for col in ("source", "item", "error", "quarantined to"):
            et.add_column(col)
        for _, e in errors:
            q = e.get("quarantined_path") or "-"
            et.add_row(e["source"], str(e["item"]), e["message"][:60], Path(q).name)
        console.print(et)
    windows = sub.of("window")
    health = sub.of("health")
    console.print(
        f"windows: {len(windows)}  results: {len(results)}  errors: {len(errors)}  "
        f"health messages: {len(health)}  status: "
        + ", ".join(p["state"] for _, p in sub.of("status"))
    )
    if health:
        h = health[-1][1]
        console.print(
            f"last health: items={h['items']} windows={h['windows']} errors={h['errors']} "
            f"dropped={h['dropped']} bytes_written={h['bytes_written']}"
        )
    return len(results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    ap.add_argument("--demo-dir", type=Path, default=ROOT / "demo")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds the agent runs")
    ap.add_argument("--rate", type=float, default=15.0, help="staged files dropped per second")
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    args = ap.parse_args()
    console = Console()
    missing = [m for m in MODELS if not (args.models / m).is_file()]
    if missing:
        console.print(
            f"[red]missing models in {args.models}: {', '.join(missing)}[/red] — "
            "they ship with the repository (scripts/demo/train_demo_models.py rebuilds "
            "them)"
        )
        return 2
    demo = args.demo_dir.resolve()
    truth = json.loads((demo / "truth.json").read_text())

    broker = EmbeddedBroker().start()
    host, port = broker.host, broker.port
    console.print(f"embedded MQTT broker on {broker.url}; subscribing to cdml/#")
    sub = Subscriber(host, port, "cdml")
    env = dict(os.environ)
    env.update(
        DEMO_MQTT_URL=f"mqtt://{host}:{port}",
        DEMO_DIR=str(demo),
        DEMO_VIDEO=str(demo / "camera.avi"),
        DEMO_MODELS=str(args.models.resolve()),
    )
    cmd = [
        sys.executable,
        "-m",
        "cdml_edge.cli",
        "run",
        "--config",
        str(args.config),
        "--duration",
        str(args.duration),
        "--log-level",
        "WARNING",
    ]
    console.print(
        "$ cdml-edge run --config "
        + str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config)
        + f" --duration {args.duration:g}"
    )
    t0 = time.monotonic()
    agent = subprocess.Popen(cmd, env=env, cwd=ROOT)
    try:
        if not sub.online.wait(180):
            console.print("[red]the agent did not come online within 180 s[/red]")
            agent.terminate()
            return 1
        console.print(f"agent online after {time.monotonic() - t0:.1f} s; dropping files ...")
        n = feed(demo, args.rate)
        console.print(f"dropped {n} files into {demo / 'in'}; waiting for the agent to finish")
        code = agent.wait(timeout=args.duration + 60)
    finally:
        if agent.poll() is None:
            agent.kill()
    time.sleep(0.5)  # last messages in flight to the subscriber
    sub.close()
    broker.stop()
    console.print(f"agent exited with {code} after {time.monotonic() - t0:.1f} s")
    got = report(sub, truth, console)
    left = sorted(p.name for p in (demo / "in").glob("*/*"))
    if left:
        console.print(f"[yellow]files still waiting in {demo / 'in'}: {left[:5]}[/yellow]")
    console.print(
        f"local copy of every message: {demo / 'out.jsonl'}; retained windows: "
        f"{len(list((demo / 'state' / 'retention').glob('*.window.json')))} in "
        f"{demo / 'state' / 'retention'}"
    )
    return 0 if code == 0 and got > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
