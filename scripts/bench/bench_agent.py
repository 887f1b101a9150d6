#!/usr/bin/env python3
"""Agent benchmark: what ``cdml-edge run`` costs per item, against decode + infer alone.

For each input kind - 64-px and 224-px JPEG digits (``digits.onnx``), 1-s motor clips
(``audio_anomaly.onnx``), 256x3 vibration CSV (``vibration_anomaly.onnx``) - one agent
process watches a folder (windows of at most 50 ms (``--window-ms``) / 32 items, closing
when a worker is free unless ``--fixed-windows``; ``on_done: delete``; JSON-lines output;
``max_inflight_bytes`` 8 MiB unless ``--inflight-mib``) and is measured:

* start: seconds from launching the process to its ``online`` status (READY);
* idle: CPU % of one core over 3 s with nothing to do, and RSS;
* at 10, 30 and 100 files/s written by a Python writer: CPU % of one core, CPU-ms per item
  (and of it, per item, the ``mqtt-io`` thread's and the pipeline workers': ``io ms``,
  ``pipe ms``) and its ratio to the baseline, latency from the writer's ``close()`` to the
  result line in the output (p50 / p99, tail polled every 1 ms) and as the agent reports
  it, the mean items per window, and peak RSS;
* sustained maximum: a backlog of files renamed into the folder at once, items/s from the
  first rename to the last result; every file must be scored exactly once and leave the
  folder; peak RSS against idle RSS + ``max_inflight_bytes``.

Baseline, in this process and in the same run: the agent's own decode + prepare + one
onnxruntime run (same session settings) on the same files, without watching, packing,
reading back or output, with the agent's BLAS thread limit - CPU-ms per item at batch 1
(what a window of one item costs) and batch 32; ``x base`` is the ratio to batch 1, ``x b32``
to batch 32, ``x cold`` to batch 1 with a 10-ms sleep before each item (the same work on
cold caches, as when it runs once per file at 100 files/s). CPU is the time the agent's
threads spent on a CPU.

Each kind runs once per ``--outputs`` entry (MQTT QoS 1 to a real broker, JSON lines), and
once more pinned to CPU 0 with ``taskset`` (``--single-core``, the board-like row). The MQTT
runs repeat for each ``--results`` entry in its order (``mqtt.results``: ``item``, a result
message per item; ``window``, the items inside their window's message), so ``item,window,
item,window`` alternates the two in one session. With
``--neighbours N`` (default: one per CPU) an extra 30 files/s row runs beside N CPU-bound
processes; every row shows the load average at its end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from cgroups import WeightedGroup
from timing import cpu_per_item, load_average, percentile

from cdml_edge import synth

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
INFLIGHT_MIB = 8  # limits.max_inflight_bytes, MiB (--inflight-mib)
MQTT_URL = os.environ.get("MQTT_URL", "mqtt://127.0.0.1:1883")


def jpegs(size: int, n: int = 64) -> list[bytes]:
    import cv2

    imgs, _ = synth.digit_images(n, seed=3, size=size)
    return [cv2.imencode(".jpg", im[:, :, ::-1])[1].tobytes() for im in imgs]


@dataclass(frozen=True)
class Kind:
    """One input kind: its files, model and the backlog size of the sustained phase."""

    label: str
    modality: str
    model: str
    ext: str
    make: Callable[[], list[bytes]]
    backlog: int


KINDS: dict[str, Kind] = {
    "64px": Kind("64-px JPEG", "image", "digits.onnx", ".jpg", lambda: jpegs(64), 4000),
    "224px": Kind("224-px JPEG", "image", "digits.onnx", ".jpg", lambda: jpegs(224), 2000),
    "audio": Kind(
        "1-s WAV, 16 kHz",
        "audio",
        "audio_anomaly.onnx",
        ".wav",
        lambda: synth.machine_audio(16, seed=3),
        600,
    ),
    "vibration": Kind(
        "256x3 CSV",
        "timeseries",
        "vibration_anomaly.onnx",
        ".csv",
        lambda: synth.vibration_csv(16, seed=5),
        2000,
    ),
}


def topic_prefix(tmp: Path) -> str:
    """The MQTT topic prefix of the run in ``tmp``: its own, so runs never mix."""
    return f"bench{os.getpid()}{tmp.name[-8:]}".replace("_", "")


def output_section(tmp: Path, output: str, results: str = "item") -> str:
    """The config's output: JSON lines only, or MQTT QoS 1 to the broker (no local copy).

    ``results``: the MQTT output's ``mqtt.results``.
    """
    if output == "jsonl":
        return f"output: {{jsonl: {tmp}/out.jsonl}}"
    prefix = topic_prefix(tmp)
    return (
        f"mqtt: {{url: '{MQTT_URL}', topic_prefix: {prefix}, qos: 1, results: {results}}}\n"
        f"spool: {{dir: {tmp}/spool}}\n"
        f"state_dir: {tmp}/state"
    )


def config(
    tmp: Path,
    kind: Kind,
    fixed: bool,
    inflight_mib: int,
    output: str = "jsonl",
    window_ms: float = 50.0,
    results: str = "item",
) -> Path:
    idle = "false" if fixed else "true"
    text = f"""
device: {{id: {topic_prefix(tmp)}}}
sources:
  - name: src
    kind: folder
    path: {tmp}/in
    modality: {kind.modality}
    patterns: ["*{kind.ext}"]
    window: {{seconds: {window_ms:g}ms, max_items: 32, close_when_idle: {idle}}}
    stable_seconds: 50ms
    on_done: delete
models:
  {kind.modality}: {{path: {MODELS / kind.model}}}
pack: {{format: zip, level: 1}}
quarantine: {{dir: {tmp}/quarantine}}
limits: {{max_inflight_bytes: {inflight_mib}MiB}}
health: {{interval: 1s}}
{output_section(tmp, output, results)}
"""
    p = tmp / "bench.yaml"
    p.write_text(text)
    return p


class Results:
    """What the agent published, as it arrived.

    It notes when each result appeared, the agent's own latency, the window of each result
    and the items per window. :class:`FileTail` feeds it from the JSON-lines output,
    :class:`MqttTail` from the broker.
    """

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.agent_latency: dict[str, float] = {}
        self.window_of: dict[str, str] = {}
        self.window_items: dict[str, int] = {}
        self.online: float | None = None
        self.duplicates = 0
        self._lock = threading.Lock()

    def line(self, topic: str, p: dict[str, Any], now: float) -> None:
        """One message as it arrived.

        A window's embedded results (``mqtt.results: window``) arrived with it.
        """
        with self._lock:
            if topic.endswith("/result"):
                self._result(p, now)
            elif topic.endswith("/window"):
                self.window_items[p["window_id"]] = p["items"]
                for r in p.get("results") or []:
                    self._result(r, now)
            elif topic.endswith("/status") and p["state"] == "online" and self.online is None:
                self.online = now

    def _result(self, p: dict[str, Any], now: float) -> None:
        if p["item"] in self.seen:
            self.duplicates += 1
        self.seen.setdefault(p["item"], now)
        self.agent_latency[p["item"]] = p["latency_ms"]
        self.window_of[p["item"]] = p["window_id"]

    def wait(self, names: dict[str, float], timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and not all(k in self.seen for k in names):
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop following."""


class FileTail(Results):
    """Follows the agent's JSON-lines output (polled every millisecond)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.path.exists() and not self._stop.is_set():
            time.sleep(0.001)
        with open(self.path, encoding="utf-8") as fh:
            buf = ""
            while not self._stop.is_set():
                chunk = fh.read()
                if not chunk:
                    time.sleep(0.001)
                    continue
                now = time.time()
                *lines, buf = (buf + chunk).split("\n")
                for text in lines:
                    msg = json.loads(text)
                    self.line(msg["topic"], msg["payload"], now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


class MqttTail(Results):
    """Subscribes to the agent's topics on the broker (QoS 1), before the agent starts."""

    def __init__(self, prefix: str) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        super().__init__()
        host, _, port = MQTT_URL.split("://", 1)[1].partition(":")
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self._client.on_message = self._message
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *a: subscribed.set()
        self._client.connect(host, int(port or 1883))
        self._client.subscribe(f"{prefix}/#", qos=1)
        self._client.loop_start()
        if not subscribed.wait(10):
            raise RuntimeError(f"no SUBACK from the broker at {MQTT_URL}")

    def _message(self, client: Any, userdata: Any, msg: Any) -> None:
        if msg.payload:
            self.line(msg.topic, json.loads(msg.payload), time.time())

    def stop(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()


THREAD_GROUPS = ("mqtt-io", "pipeline")
"""The agent's threads whose CPU a rate row shows apart (by name; the workers together)."""


class Agent:
    """``cdml-edge run`` in a subprocess, with its CPU time and RSS sampled."""

    def __init__(
        self,
        cfg: Path,
        cpus: str | None = None,
        nice: int = 0,
        weight: int = 0,
        workers: int = 2,
    ) -> None:
        self.launched = time.time()
        pin = ["taskset", "-c", cpus] if cpus else []
        if nice:
            pin = ["nice", "-n", str(nice), *pin]
        self.proc = subprocess.Popen(
            [
                *pin,
                sys.executable,
                "-m",
                "cdml_edge.cli",
                "run",
                "--config",
                str(cfg),
                "--log-level",
                "ERROR",
                "--workers",
                str(workers),
            ],
            cwd=ROOT,
        )
        self.group = WeightedGroup("cdml-bench-agent", weight) if weight else None
        if self.group is not None:
            self.group.add(self.proc.pid)
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_rss = max(self.peak_rss, self.ps.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.01)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def cpu(self) -> float:
        """CPU seconds of the agent: its threads' time on a CPU.

        From ``schedstat`` (nanoseconds); ``cpu_times`` counts in 10-ms ticks, too coarse for
        40 items at 10/s.
        """
        threads = self._threads()
        if threads is None:
            t = self.ps.cpu_times()
            return float(t.user + t.system)
        return sum(ns for _, ns in threads) / 1e9

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds per thread group: ``mqtt-io``, ``pipeline`` (its workers together)."""
        out = dict.fromkeys(THREAD_GROUPS, 0.0)
        for name, ns in self._threads() or []:
            group = next((g for g in THREAD_GROUPS if name.startswith(g)), None)
            if group is not None:
                out[group] += ns / 1e9
        return out

    def _threads(self) -> list[tuple[str, int]] | None:
        """Each thread's name and nanoseconds on a CPU; ``None`` once the process is gone."""
        task = f"/proc/{self.proc.pid}/task"
        try:
            tids = os.listdir(task)
        except OSError:
            return None
        out = []
        for tid in tids:
            try:
                with open(f"{task}/{tid}/comm", encoding="utf-8") as fh:
                    name = fh.read().strip()
                with open(f"{task}/{tid}/schedstat", encoding="ascii") as fh:
                    out.append((name, int(fh.read().split()[0])))
            except OSError:  # the thread ended meanwhile
                continue
        return out

    def stop(self) -> int:
        self.proc.terminate()
        code = self.proc.wait(60)
        self._stop.set()
        if self.group is not None:
            self.group.remove()
        return code


def feed(
    inbox: Path, prefix: str, data: list[bytes], ext: str, rate: float, seconds: float
) -> dict[str, float]:
    """Write ``rate`` files/s for ``seconds``; file name -> wall time of its ``close()``."""
    closed: dict[str, float] = {}
    t0 = time.perf_counter()
    for n in range(int(rate * seconds)):
        delay = t0 + n / rate - time.perf_counter()
        if delay > 0.001:  # below a millisecond, write on: sleep() overshoots
            time.sleep(delay)
        name = f"{prefix}-{n:06d}{ext}"
        with open(inbox / name, "wb") as fh:
            fh.write(data[n % len(data)])
        closed[name] = time.time()
    return closed


def rate_phase(
    agent: Agent,
    tail: Results,
    inbox: Path,
    kind: Kind,
    data: list[bytes],
    rate: float,
    seconds: float,
    prefix: str = "r",
) -> dict[str, Any]:
    cpu0, w0, threads0 = agent.cpu(), time.perf_counter(), agent.thread_cpu()
    agent.peak_rss = agent.rss()
    closed = feed(inbox, f"{prefix}{rate:g}", data, kind.ext, rate, seconds)
    tail.wait(closed, timeout=60)
    wall, cpu = time.perf_counter() - w0, agent.cpu() - cpu0
    threads = {k: v - threads0[k] for k, v in agent.thread_cpu().items()}
    got = [k for k in closed if k in tail.seen]
    windows = {tail.window_of[k] for k in got}
    sizes = [tail.window_items.get(w, 0) for w in windows]
    return {
        "rate": rate,
        "files": len(closed),
        "results": len(got),
        "cpu_pct": 100 * cpu / wall,
        "cpu_ms": 1000 * cpu / max(1, len(got)),
        "io_ms": 1000 * threads["mqtt-io"] / max(1, len(got)),
        "pipe_ms": 1000 * threads["pipeline"] / max(1, len(got)),
        "p50": percentile([(tail.seen[k] - closed[k]) * 1000 for k in got], 50),
        "p99": percentile([(tail.seen[k] - closed[k]) * 1000 for k in got], 99),
        "agent_p99": percentile([tail.agent_latency[k] for k in got], 99),
        "per_window": float(np.mean(sizes)) if sizes else 0.0,
        "peak_rss": agent.peak_rss,
        "load": load_average(),
    }


class Neighbours:
    """``count`` CPU-bound processes (one busy loop each) beside the agent while in use.

    With ``weighted``, they share a control group of the default CPU weight (100), as
    another service would, the agent being in its own (``--cpu-weight``).
    """

    def __init__(self, count: int, weighted: bool = False) -> None:
        self.count = count
        self.weighted = weighted
        self._procs: list[subprocess.Popen[bytes]] = []
        self._group: WeightedGroup | None = None

    def __enter__(self) -> Neighbours:
        loop = "while True:\n    pass"
        self._procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(self.count)]
        if self.weighted:
            self._group = WeightedGroup("cdml-bench-neighbours", 100)
            for proc in self._procs:
                self._group.add(proc.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
        if self._group is not None:
            self._group.remove()


def sustained_phase(
    agent: Agent, tail: Results, tmp: Path, kind: Kind, data: list[bytes], count: int
) -> dict[str, Any]:
    """Stage ``count`` files, rename them all into the folder, wait for every result."""
    stage = tmp / "stage"
    stage.mkdir()
    names = [f"s-{n:06d}{kind.ext}" for n in range(count)]
    for n, name in enumerate(names):
        (stage / name).write_bytes(data[n % len(data)])
    agent.peak_rss = agent.rss()
    cpu0, t0 = agent.cpu(), time.time()
    for name in names:
        os.replace(stage / name, tmp / "in" / name)
    tail.wait(dict.fromkeys(names, t0), timeout=300)
    got = [tail.seen[k] for k in names if k in tail.seen]
    last = max(got) if got else time.time()
    return {
        "files": count,
        "results": len(got),
        "items_s": len(got) / max(1e-9, last - t0),
        "cpu_ms": 1000 * (agent.cpu() - cpu0) / max(1, len(got)),
        "peak_rss": agent.peak_rss,
    }


COLD_GAP = 0.01
"""The cold baseline's sleep before each item: the gap between files at 100 files/s."""


def baseline(
    kind: Kind, data: list[bytes], batch: int, seconds: float = 1.5, gap: float = 0.0
) -> float:
    """CPU-ms per item of decode + prepare + onnxruntime in this process, one thread.

    With the agent's session settings and BLAS thread limit; with ``gap``, a sleep of that
    many seconds before each batch (the work then runs with cold caches, as in an agent
    that is woken for each file).
    """
    from cdml_edge.agent.startup import limit_blas_threads
    from cdml_edge.model.runner import ModelRunner
    from cdml_edge.window.inputs import MODEL_INPUTS

    limit_blas_threads()

    runner = ModelRunner.load(MODELS / kind.model)
    decode = MODEL_INPUTS[kind.modality].decode
    name = f"x{kind.ext}"

    done = 0  # items so far: each batch starts where the last one ended

    def prepared(item: bytes) -> np.ndarray:
        array = decode(item, name, runner.spec.input)
        if array is None:
            raise ValueError(f"{kind.modality}: decoded to no model input")
        return runner.prepare(array)

    def one_batch() -> int:
        nonlocal done
        if gap:
            time.sleep(gap)
        rows = [prepared(data[(done + i) % len(data)]) for i in range(batch)]
        runner.run(np.stack(rows))
        done += batch
        return batch

    return 1000 * cpu_per_item(one_batch, seconds, warmup=3)


def run_kind(
    key: str,
    args: argparse.Namespace,
    output: str,
    cpus: str | None = None,
    results: str = "item",
) -> dict[str, Any]:
    kind = KINDS[key]
    data = kind.make()
    with tempfile.TemporaryDirectory(prefix="cdml-bench-") as d:
        tmp = Path(d)
        (tmp / "in").mkdir()
        cfg = config(
            tmp, kind, args.fixed_windows, args.inflight_mib, output, args.window_ms, results
        )
        tail: Results = (
            MqttTail(topic_prefix(tmp)) if output == "mqtt" else FileTail(tmp / "out.jsonl")
        )
        agent = Agent(cfg, cpus, args.nice, args.cpu_weight, args.workers)
        try:
            warm = feed(tmp / "in", "warm", data, kind.ext, 20, 1.0)
            tail.wait(warm, timeout=180)
            ready_s = (tail.online or time.time()) - agent.launched
            time.sleep(1.0)
            idle_rss, c0 = agent.rss(), agent.cpu()
            time.sleep(3.0)
            idle_pct = 100 * (agent.cpu() - c0) / 3.0
            rows = [
                rate_phase(agent, tail, tmp / "in", kind, data, r, args.seconds)
                for r in args.rate_list
            ]
            if args.neighbours:
                with Neighbours(args.neighbours, weighted=bool(args.cpu_weight)):
                    loaded = rate_phase(agent, tail, tmp / "in", kind, data, 30, args.seconds, "n")
                rows.append({**loaded, "neighbours": args.neighbours, "weight": args.cpu_weight})
            backlog = max(1, int(kind.backlog * args.backlog_scale))
            sus = sustained_phase(agent, tail, tmp, kind, data, backlog)
        finally:
            tail.stop()
            code = agent.stop()
        left = len(list((tmp / "in").iterdir()))
    shown = output if output == "jsonl" else f"{output}, results: {results}"
    return {
        "kind": kind,
        "output": shown if cpus is None else f"{shown}, CPU {cpus} only",
        "ready_s": ready_s,
        "idle_pct": idle_pct,
        "idle_rss": idle_rss,
        "rows": rows,
        "sustained": sus,
        "left": left,
        "duplicates": tail.duplicates,
        "exit": code,
        "base1": baseline(kind, data, 1),
        "base32": baseline(kind, data, 32),
        "cold": baseline(kind, data, 1, gap=COLD_GAP),
    }


def report(r: dict[str, Any], inflight_mib: int) -> bool:
    kind, mib = r["kind"], 2**20
    b1 = r["base1"]
    print(
        f"\n== {kind.label} ({kind.model}), {r['output']}: READY {r['ready_s']:.1f} s after "
        f"launch; idle CPU "
        f"{r['idle_pct']:.2f} % of a core, idle RSS {r['idle_rss'] / mib:.0f} MiB"
    )
    print(
        f"baseline in-process decode + infer: {b1:.3f} CPU-ms/item at batch 1, "
        f"{r['base32']:.3f} at batch 32, {r['cold']:.3f} at batch 1 every "
        f"{COLD_GAP * 1000:g} ms (cold: x cold)"
    )
    print(
        f"{'files/s':>8}{'CPU %':>7}{'CPU-ms/item':>12}{'io ms':>7}{'pipe ms':>8}"
        f"{'x base':>8}{'x b32':>7}{'x cold':>7}"
        f"{'p50 ms':>8}"
        f"{'p99 ms':>8}{'agent p99':>10}{'items/win':>10}{'peak RSS':>9}{'lost':>5}"
        f"{'load':>6}"
    )
    for x in r["rows"]:
        print(
            f"{x['rate']:>8g}{x['cpu_pct']:>7.1f}{x['cpu_ms']:>12.3f}{x['io_ms']:>7.3f}"
            f"{x['pipe_ms']:>8.3f}{x['cpu_ms'] / b1:>8.1f}"
            f"{x['cpu_ms'] / r['base32']:>7.1f}{x['cpu_ms'] / r['cold']:>7.1f}"
            f"{x['p50']:>8.1f}{x['p99']:>8.1f}{x['agent_p99']:>10.1f}{x['per_window']:>10.1f}"
            f"{x['peak_rss'] / mib:>9.0f}{x['files'] - x['results']:>5}{x['load']:>6.1f}"
            + (f"  beside {x['neighbours']} CPU-bound processes" if "neighbours" in x else "")
            + (f" (agent CPU weight {x['weight']} to their 100)" if x.get("weight") else "")
        )
    s = r["sustained"]
    bound = r["idle_rss"] + inflight_mib * mib
    once = s["results"] == s["files"] and r["duplicates"] == 0 and r["left"] == 0
    print(
        f"sustained: {s['items_s']:.0f} items/s over a backlog of {s['files']} files "
        f"({s['cpu_ms']:.3f} CPU-ms/item, {s['cpu_ms'] / b1:.1f}x base); every file scored "
        f"once: {'yes' if once else 'NO'} ({s['results']} results, {r['duplicates']} "
        f"duplicates, {r['left']} left); peak RSS {s['peak_rss'] / mib:.0f} MiB = "
        f"{s['peak_rss'] / bound:.2f}x of idle + {inflight_mib} MiB (peak - idle "
        f"{(s['peak_rss'] - r['idle_rss']) / mib:.1f} MiB); exit {r['exit']}"
    )
    return once and r["exit"] == 0


def planned_runs(args: argparse.Namespace) -> list[tuple[str, str | None, str]]:
    """Each run of a kind: its output, the CPUs it is pinned to, its ``mqtt.results``."""
    modes = [m for m in args.results.split(",") if m] or ["item"]
    outputs = [o for o in args.outputs.split(",") if o]
    if args.single_core and shutil.which("taskset"):
        outputs.append(f"{args.single_core}@0")
    runs: list[tuple[str, str | None, str]] = []
    for o in outputs:
        output, _, cpus = o.partition("@")
        for mode in modes if output == "mqtt" else ["item"]:
            runs.append((output, cpus or None, mode))
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per rate")
    ap.add_argument("--rates", default="10,30,100")
    ap.add_argument("--backlog-scale", type=float, default=1.0, help="scales each backlog")
    ap.add_argument(
        "--inflight-mib", type=int, default=INFLIGHT_MIB, help="limits.max_inflight_bytes in MiB"
    )
    ap.add_argument(
        "--fixed-windows",
        action="store_true",
        help="windows close on their limits only (close_when_idle: false)",
    )
    ap.add_argument("--workers", type=int, default=2, help="the agent's pipeline threads")
    ap.add_argument(
        "--window-ms",
        type=float,
        default=50.0,
        help="window.seconds in ms (with --fixed-windows: how long a window gathers items)",
    )
    ap.add_argument(
        "--outputs",
        default="mqtt,jsonl",
        help="mqtt (QoS 1 to the broker at $MQTT_URL) and/or jsonl, each a row",
    )
    ap.add_argument(
        "--results",
        default="item",
        help="mqtt.results of the MQTT runs (item, window), each a row in this order: "
        "item,window,item,window alternates them",
    )
    ap.add_argument(
        "--single-core",
        default="mqtt",
        help="also run this output with the agent pinned to CPU 0 (taskset), the board-like "
        "row; empty for none",
    )
    ap.add_argument(
        "--neighbours",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU-bound processes beside the agent for an extra 30 files/s row (0: none)",
    )
    ap.add_argument(
        "--cpu-weight",
        type=int,
        default=0,
        help="put the agent in a control group of this CPU weight and the neighbours in one "
        "of 100, as systemd's CPUWeight= does for two services (root; 0: off)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the agent at this niceness (the systemd unit's is -2; below 0 needs root)",
    )
    args = ap.parse_args()
    args.rate_list = [float(x) for x in args.rates.split(",") if x]
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load_average():.1f} at start; "
        f"windows {args.window_ms:g} ms / 32 items, "
        f"{'fixed' if args.fixed_windows else 'close when idle'}; "
        f"agent niceness {args.nice}"
    )
    ok = True
    for key in [k for k in args.kinds.split(",") if k]:
        for output, cpus, results in planned_runs(args):
            ok = report(run_kind(key, args, output, cpus, results), args.inflight_mib) and ok
    print(f"\nload average {load_average():.1f} at the end")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
