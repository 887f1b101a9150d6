"""The main process's CPU per image for receiving a worker's batch and reading it once.

A DataLoader worker's batch buffers come back to the main process as shared memory. Two
ways, alternating in one run, each in a process of its own: the buffer mapped anew for every
batch (``CDML_EDGE_BATCH_MAPPINGS_MIB=0``: a descriptor fetched from the worker, ``mmap``,
a page fault per page as the batch is read) and kept mapped from one batch to the next (the
default). ``DataLoader(num_workers=2, persistent_workers=True)`` over our ZIP of 224-px
JPEGs, 224-px targets, uint8 batches with ``collate_fn=collate`` and the float32 defaults;
steady epochs (the first, where every buffer is new, is not counted).

Per image, in the main process (``time.process_time``): *receive* is ``next()`` on the
loader, *read* a first touch of each of the batch's pages (what any use of the batch does
first), and the CPU of the whole run (main process and workers, from ``/proc``) per image.
Best of ``--reps`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_dataset import make_images
from timing import load_average, ratio
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset
from cdml_edge.archive import write_archive
from cdml_edge.data import collate

BATCH = 64
TARGET = 224
EPOCHS = 3
MODES = {"mapped anew per batch": "0", "kept mapped (default)": ""}
KINDS = {"uint8, collate": ("uint8", collate), "float32, defaults": ("float32", None)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(archive: Path, kind: str) -> dict[str, float]:
    """One loader, EPOCHS epochs; the steady ones measured (run in a process of its own)."""
    dtype, collate_fn = KINDS[kind]
    ds = CDMLStreamDataset(
        archive, is_image=True, target_size=TARGET, labels="folder", image_dtype=dtype
    )
    loader = DataLoader(
        ds, batch_size=BATCH, num_workers=2, persistent_workers=True, collate_fn=collate_fn
    )
    receive = read = 0.0
    images = 0
    for epoch in range(EPOCHS):
        if epoch == 1:
            pids = [os.getpid()] + [w.pid for w in loader._iterator._workers]  # type: ignore[union-attr]
            cpu0, t0 = sum(_cpu_seconds(p) for p in pids), time.perf_counter()
        it = iter(loader)
        while True:
            c0 = time.process_time()
            try:
                x, _ = next(it)
            except StopIteration:
                break
            c1 = time.process_time()
            x.view(-1).view(torch.uint8)[::4096].sum()  # each page once
            c2 = time.process_time()
            if epoch:
                receive += c1 - c0
                read += c2 - c1
                images += x.shape[0]
            del x
    wall = time.perf_counter() - t0
    cpu = sum(_cpu_seconds(p) for p in pids) - cpu0
    return {
        "receive_us": receive / images * 1e6,
        "read_us": read / images * 1e6,
        "all_cpu_us": cpu / images * 1e6,
        "images_per_s": images / wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--one", nargs=2, metavar=("ARCHIVE", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        torch.set_num_threads(1)
        print(json.dumps(one_run(Path(args.one[0]), args.one[1])))
        return 0
    best: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-receive-") as tmp:
        archive = Path(tmp) / "images.zip"
        write_archive(archive, make_images(args.images - args.images % BATCH))
        for _ in range(args.reps):
            for kind in KINDS:
                for mode, mib in MODES.items():
                    env = {**os.environ, "CDML_EDGE_BATCH_MAPPINGS_MIB": mib}
                    cmd = [sys.executable, __file__, "--one", str(archive), kind]
                    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                    run = json.loads(out.stdout.strip().splitlines()[-1])
                    cell = best.setdefault(kind, {}).setdefault(mode, run)
                    for key, value in run.items():
                        better = max if key == "images_per_s" else min
                        cell[key] = better(cell[key], value)
    report(best, args)
    if args.json:
        args.json.write_text(json.dumps(best, indent=2))
    return 0


def report(best: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"{args.images} JPEGs of 224x224 at {TARGET} px, batch_size={BATCH}, 2 persistent "
        f"workers, epochs 2-{EPOCHS}, best of {args.reps}; {os.cpu_count()} CPUs, load "
        f"average {load_average():.1f} at the end"
    )
    print("µs per image: main process receive + read = main | all processes | images/s")
    for kind, modes in best.items():
        base = modes[next(iter(MODES))]
        for mode, r in modes.items():
            main = r["receive_us"] + r["read_us"]
            gain = (
                ""
                if r is base
                else (
                    f"  (main {ratio(base['receive_us'] + base['read_us'], main)} less, "
                    f"all {ratio(base['all_cpu_us'], r['all_cpu_us'])} less)"
                )
            )
            print(
                f"  {kind:18} {mode:24} {r['receive_us']:6.1f} + {r['read_us']:6.1f} = "
                f"{main:6.1f} | {r['all_cpu_us']:6.1f} | {r['images_per_s']:7,.0f}{gain}"
            )


if __name__ == "__main__":
    sys.exit(main())
