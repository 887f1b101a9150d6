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
started: Ray's raylet, GCS and workers), so CPU per item includes Ray's own overhead. Ray's
per-item cost is the slope between the two Ray runs, its fixed cost per job what the small
run costs beyond its items (on a running Ray: workers already started once). The targets
(Ray CPU per item within 1.5x of local, a fixed cost under 5 s, export at >= 0.5x the
local MB per CPU-second) are printed met or missed; the last line turns the measured per-item
cost into a plan for a large fleet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench_replay import build_model, make_windows
from timing import Timing, load_average, measure_tree, ratio

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import export_trainset
from cdml_edge.retrain.export_job import ExportOptions, parse_selection
from cdml_edge.retrain.fleet import RaySettings, fleet_export, fleet_replay, ray_session
from cdml_edge.retrain.fleet.scorer import ModelShipment, ship_models
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
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept")
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
        local = best_tree(
            lambda: [replay_to_jsonl(r, runners, d / "l.jsonl") for r in rings], args.repeat
        )
        member_bytes = [export_trainset(r, d / f"l{i}.zip").bytes_in for i, r in enumerate(rings)]
        local_export = best_tree(
            lambda: [export_trainset(r, d / f"l{i}.zip") for i, r in enumerate(rings)],
            args.repeat,
        )
        timings = measure_ray(args, d, rings, ship_models(runners, {}, [model]))
    f = Figures(
        n_items,
        n_items // args.devices,
        sum(member_bytes),
        member_bytes[0],
        local,
        local_export,
        **timings,
    )
    report(args, archive_bytes, f)


def measure_ray(
    args: argparse.Namespace, d: Path, rings: list[Path], models: list[ModelShipment]
) -> dict[str, Timing]:
    """Ray replay and export of the whole fleet and of one device, on one running Ray."""
    names = {"image": "bench-brightness@1.0.0"}
    sel = parse_selection(ExportOptions(d, d / "x.zip"))

    def replay(root: Path) -> None:
        shutil.rmtree(d / "r.parquet", ignore_errors=True)
        st = fleet_replay(str(root), models, names, d / "r.parquet").stats
        assert st.corrupt == 0 and st.missing == 0, st

    def export(root: Path) -> None:
        st = fleet_export(str(root), d / "f.zip", sel).stats
        assert st.corrupt == 0 and st.exported > 0, st

    with ray_session(RaySettings(num_cpus=args.cpus, temp_dir=str(d / "ray"))):
        replay(d / "fleet")  # warm: worker processes imported, not timed
        runs: dict[str, list[Timing]] = {}
        for _ in range(args.repeat):  # rounds: all and one device see the same load
            runs.setdefault("ray_all", []).append(measure_tree(lambda: replay(d / "fleet")))
            runs.setdefault("ray_one", []).append(measure_tree(lambda: replay(rings[0].parent)))
        export(d / "fleet")  # warm again: the replay's actors have taken the workers' place
        for _ in range(args.repeat):
            runs.setdefault("ray_export", []).append(measure_tree(lambda: export(d / "fleet")))
            runs.setdefault("ray_export_one", []).append(
                measure_tree(lambda: export(rings[0].parent))
            )
    return {k: best(v) for k, v in runs.items()}


def best(runs: list[Timing]) -> Timing:
    """The best wall and the best CPU time of several runs."""
    return Timing(min(t.wall for t in runs), min(t.cpu for t in runs))


def best_tree(fn: Callable[[], object], repeat: int) -> Timing:
    """:func:`best` of ``repeat`` calls of ``fn``, each measured with :func:`measure_tree`."""
    return best([measure_tree(fn) for _ in range(repeat)])


@dataclasses.dataclass(frozen=True)
class Figures:
    """What the run measured, and the per-item figures derived from it."""

    n_items: int
    n_one: int
    member_bytes: int
    member_bytes_one: int
    local: Timing
    local_export: Timing
    ray_all: Timing
    ray_one: Timing
    ray_export: Timing
    ray_export_one: Timing

    @property
    def ray_cpu_item(self) -> float:
        """Ray replay's CPU seconds per item: the slope between the two fleet sizes."""
        return (self.ray_all.cpu - self.ray_one.cpu) / max(1, self.n_items - self.n_one)

    @property
    def ray_wall_item(self) -> float:
        return (self.ray_all.wall - self.ray_one.wall) / max(1, self.n_items - self.n_one)

    @property
    def fixed_wall(self) -> float:
        """Wall seconds of a Ray replay job beyond its items (actor start, model load)."""
        return max(0.0, self.ray_one.wall - self.ray_wall_item * self.n_one)

    @property
    def fixed_cpu(self) -> float:
        return max(0.0, self.ray_one.cpu - self.ray_cpu_item * self.n_one)

    @property
    def export_mb_cpu(self) -> float:
        """Ray export's member MB per CPU second beyond its fixed cost (the slope)."""
        mb = (self.member_bytes - self.member_bytes_one) / 1e6
        return mb / max(1e-9, self.ray_export.cpu - self.ray_export_one.cpu)

    @property
    def export_fixed_wall(self) -> float:
        mb = (self.member_bytes - self.member_bytes_one) / 1e6
        per_mb = (self.ray_export.wall - self.ray_export_one.wall) / max(1e-9, mb)
        return max(0.0, self.ray_export_one.wall - per_mb * self.member_bytes_one / 1e6)


def report(args: argparse.Namespace, archive_bytes: int, f: Figures) -> None:
    """Long: the measured figures side by side, the targets, then the plan derived from them."""
    print(
        f"fleet: {args.devices} devices x {args.windows} windows x {args.per_window} PNG "
        f"{args.size}x{args.size} = {f.n_items} items, {archive_bytes / 1e6:.1f} MB of "
        f"archives; Ray on {args.cpus} CPUs; load average {load_average():.1f}"
    )
    _replay_table(f)
    _export_table(f)
    _targets(f)
    _plan(args, archive_bytes, f.ray_cpu_item)


def _replay_table(f: Figures) -> None:
    print(f"{'replay':<34}{'items/s':>9}{'vs local':>10}{'wall s':>8}{'CPU ms/item':>13}")
    base = f.n_items / f.local.wall
    for name, run, n in (
        ("local (one process, ring by ring)", f.local, f.n_items),
        ("Ray, all devices", f.ray_all, f.n_items),
        (f"Ray, one device ({f.n_one} items)", f.ray_one, f.n_one),
    ):
        ips = n / run.wall
        print(
            f"{name:<34}{ips:>9.0f}{ratio(ips, base):>10}{run.wall:>8.2f}{run.cpu / n * 1e3:>13.2f}"
        )
    print(
        f"Ray replay: fixed cost per job {f.fixed_wall:.2f} s wall ({f.fixed_cpu:.2f} s CPU), "
        f"then {f.ray_wall_item * 1e3:.2f} ms wall and {f.ray_cpu_item * 1e3:.2f} ms CPU per "
        f"item (local: {f.local.cpu / f.n_items * 1e3:.2f} ms CPU per item)"
    )


def _export_table(f: Figures) -> None:
    print(f"{'export':<34}{'MB/s':>9}{'vs local':>10}{'wall s':>8}{'MB/CPU-s':>13}")
    mb, mb_one = f.member_bytes / 1e6, f.member_bytes_one / 1e6
    base = mb / f.local_export.wall
    for name, run, size in (
        ("local (ring by ring)", f.local_export, mb),
        ("Ray (whole fleet, one shard)", f.ray_export, mb),
        ("Ray, one device", f.ray_export_one, mb_one),
    ):
        rate = size / run.wall
        print(
            f"{name:<34}{rate:>9.1f}{ratio(rate, base):>10}{run.wall:>8.2f}{size / run.cpu:>13.1f}"
        )
    print(
        f"Ray export: fixed cost per job {f.export_fixed_wall:.2f} s wall, then "
        f"{f.export_mb_cpu:.1f} MB per CPU-s (local: {mb / f.local_export.cpu:.1f})"
    )


def _targets(f: Figures) -> None:
    """The targets: CPU per item within 1.5x, fixed cost under 5 s, export MB per core."""
    local_item = f.local.cpu / f.n_items
    per_core = f.export_mb_cpu / (f.member_bytes / 1e6 / f.local_export.cpu)
    for name, value, goal, ok in (
        (
            "Ray CPU per item / local",
            f.ray_cpu_item / local_item,
            "<= 1.5x",
            f.ray_cpu_item <= 1.5 * local_item,
        ),
        ("Ray fixed cost per job, s", f.fixed_wall, "< 5 s", f.fixed_wall < 5.0),
        ("Ray export MB per CPU-s / local", per_core, ">= 0.5x", per_core >= 0.5),
    ):
        print(f"target {name:<34}{value:>8.2f}  {goal:<8} {'met' if ok else 'MISSED'}")


def _plan(args: argparse.Namespace, archive_bytes: int, cpu_item: float) -> None:
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
        f"{2 * archives:,} GETs (replay); "
        f"{cpu_h:,.0f} CPU-hours at the measured cost = {nodes:.1f} nodes of "
        f"{args.plan_node_cpus} CPUs for {args.plan_hours:g} h"
    )


if __name__ == "__main__":
    main()
