"""Fleet benchmark: local replay vs Ray replay (and export) on the same windows, one run.

A fleet of ``--devices`` retention rings (``device=…/date=…`` folders) of ``--windows``
windows x ``--per-window`` PNG frames is scored by the live pipeline first. Then, on the
same windows:

(a) local replay: ``replay_to_jsonl`` over each ring in turn (one process);
(b) Ray replay: ``fleet_replay`` over the whole tree on a local Ray of ``--cpus`` CPUs, on
    all devices and on one device (the difference gives the per-item cost, the small run
    the fixed cost of a job: actor start, model load, scheduling);
(c) local export vs Ray export of the whole fleet (MB of member bytes per second).

Wall time and CPU time are measured for each (CPU of this process and of every process it
started: Ray's raylet, GCS and workers), so CPU per item includes Ray's own overhead. The
last block turns the measured per-item costs into a plan for a large fleet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from bench_replay import build_model, make_windows
from timing import Timing, load_average, measure_tree, ratio

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import export_trainset
from cdml_edge.retrain.export_job import ExportOptions, parse_selection
from cdml_edge.retrain.fleet import RaySettings, fleet_export, fleet_replay, ray_session
from cdml_edge.retrain.fleet.scorer import ship_models
from cdml_edge.retrain.replay import replay_to_jsonl
from cdml_edge.store.retention import RetentionRing
from cdml_edge.window.items import Window
from cdml_edge.window.pack import pack_window
from cdml_edge.window.payloads import item_id
from cdml_edge.window.score import score_window


def build_fleet(
    root: Path, model: Path, devices: int, windows: int, per_window: int, size: int
) -> tuple[list[Path], int, int]:
    """Rings scored by the live pipeline; returns the ring folders, items and archive bytes."""
    runners = load_runners({"image": (model, ModelOverrides())}, warm_up=True)
    rings, nbytes = [], 0
    for d in range(devices):
        ring_dir = root / f"device=edge-{d}" / "date=2026-09-21"
        ring = RetentionRing(ring_dir, max_bytes=8 * 1024**3, fsync=False)
        for win in make_windows(windows, per_window, size):
            _rename_source(win, f"cam{d}")  # each device its own camera, own item ids
            packed = pack_window(win, device=f"edge-{d}", modality="image")
            outcome = score_window(
                packed.archive, runners, device=f"edge-{d}", archive_name=packed.name
            )
            ring.store(packed.archive, outcome.manifest)
            nbytes += len(packed.archive)
        ring.close()
        rings.append(ring_dir)
    return rings, devices * windows * per_window, nbytes


def _rename_source(win: Window, source: str) -> None:
    win.source = source
    win.window_id = win.window_id.replace("cam1", source)
    win.items = [
        dataclasses.replace(
            it, source=source, item_id=item_id(source, it.name, it.size, it.mtime_ns)
        )
        for it in win.items
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--windows", type=int, default=25, help="windows per device")
    ap.add_argument("--per-window", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--plan-devices", type=int, default=100)
    ap.add_argument("--plan-days", type=int, default=90)
    ap.add_argument(
        "--plan-windows-per-day",
        type=int,
        default=2880,
        help="retained windows per device and day (2880: one every 30 s)",
    )
    ap.add_argument("--plan-node-cpus", type=int, default=16)
    ap.add_argument("--plan-hours", type=float, default=8.0, help="wall time to aim for")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        d = Path(tmp)
        model = build_model(d / "bench.onnx", args.size)
        rings, n_items, archive_bytes = build_fleet(
            d / "fleet", model, args.devices, args.windows, args.per_window, args.size
        )
        runners = load_runners({"image": (model, ModelOverrides())}, warm_up=True)
        local = measure_tree(lambda: [replay_to_jsonl(r, runners, d / "l.jsonl") for r in rings])
        member_bytes = sum(
            export_trainset(r, d / f"l{i}.zip").bytes_in for i, r in enumerate(rings)
        )
        local_export = measure_tree(
            lambda: [export_trainset(r, d / f"l{i}.zip") for i, r in enumerate(rings)]
        )
        models = ship_models(runners, {}, [model])
        names = {"image": "bench-brightness@1.0.0"}
        sel = parse_selection(ExportOptions(d, d / "x.zip"))
        with ray_session(RaySettings(num_cpus=args.cpus, temp_dir=str(d / "ray"))):

            def fleet(root: Path) -> None:
                shutil.rmtree(d / "r.parquet", ignore_errors=True)
                st = fleet_replay(str(root), models, names, d / "r.parquet").stats
                assert st.corrupt == 0 and st.missing == 0, st

            fleet(d / "fleet")  # warm: worker processes imported, not timed
            ray_all = measure_tree(lambda: fleet(d / "fleet"))
            ray_one = measure_tree(lambda: fleet(rings[0].parent))
            ray_export = measure_tree(lambda: fleet_export(str(d / "fleet"), d / "f.zip", sel))
    report(
        args,
        n_items,
        archive_bytes,
        member_bytes,
        local,
        local_export,
        ray_all,
        ray_one,
        ray_export,
    )


def report(
    args: argparse.Namespace,
    n_items: int,
    archive_bytes: int,
    member_bytes: int,
    local: Timing,
    local_export: Timing,
    ray_all: Timing,
    ray_one: Timing,
    ray_export: Timing,
) -> None:
    """Long: one table of measured figures, then the plan derived from them."""
    n_one = n_items // args.devices
    print(
        f"fleet: {args.devices} devices x {args.windows} windows x {args.per_window} PNG "
        f"{args.size}x{args.size} = {n_items} items, {archive_bytes / 1e6:.1f} MB of "
        f"archives; Ray on {args.cpus} CPUs; load average {load_average():.1f}"
    )
    print(f"{'replay':<34}{'items/s':>9}{'vs local':>10}{'wall s':>8}{'CPU ms/item':>13}")
    base = n_items / local.wall
    for name, run, n in (
        ("local (one process, ring by ring)", local, n_items),
        ("Ray, all devices", ray_all, n_items),
        (f"Ray, one device ({n_one} items)", ray_one, n_one),
    ):
        ips = n / run.wall
        print(
            f"{name:<34}{ips:>9.0f}{ratio(ips, base):>10}{run.wall:>8.2f}{run.cpu / n * 1e3:>13.2f}"
        )
    slope = (ray_all.wall - ray_one.wall) / max(1, n_items - n_one)
    fixed = max(0.0, ray_one.wall - slope * n_one)
    cpu_item = (ray_all.cpu - ray_one.cpu) / max(1, n_items - n_one)
    print(
        f"Ray replay: fixed cost per job {fixed:.2f} s, then {slope * 1e3:.2f} ms wall and "
        f"{cpu_item * 1e3:.2f} ms CPU per item"
    )
    print(f"{'export':<34}{'MB/s':>9}{'vs local':>10}{'wall s':>8}{'CPU ms/item':>13}")
    le = member_bytes / 1e6 / local_export.wall
    re_ = member_bytes / 1e6 / ray_export.wall
    print(
        f"{'local (ring by ring)':<34}{le:>9.1f}{ratio(le, le):>10}{local_export.wall:>8.2f}"
        f"{local_export.cpu / n_items * 1e3:>13.2f}"
    )
    print(
        f"{'Ray (whole fleet, one shard)':<34}{re_:>9.1f}{ratio(re_, le):>10}"
        f"{ray_export.wall:>8.2f}{ray_export.cpu / n_items * 1e3:>13.2f}"
    )
    per_archive = archive_bytes / (args.devices * args.windows)
    archives = args.plan_devices * args.plan_days * args.plan_windows_per_day
    items = archives * args.per_window
    total = archives * per_archive
    cpu_h = items * max(cpu_item, 1e-9) / 3600
    nodes = cpu_h / (args.plan_hours * args.plan_node_cpus)
    print(
        f"plan: {args.plan_devices} devices x {args.plan_days} days x "
        f"{args.plan_windows_per_day} windows/day = {archives:,} archives, {items:,} items, "
        f"{total / 1e12:.2f} TB at {per_archive / 1e3:.0f} kB per archive; "
        f"{total / (256 << 20):,.0f} read tasks of 256 MiB; {2 * archives:,} GETs (replay); "
        f"{cpu_h:,.0f} CPU-hours at the measured cost = {nodes:.1f} nodes of "
        f"{args.plan_node_cpus} CPUs for {args.plan_hours:g} h"
    )


if __name__ == "__main__":
    main()
