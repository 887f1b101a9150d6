"""Intake hardening cost: what the safe read and the checked on_done cost per file.

Two measurements, each against a baseline measured in the same run on the same files:

(a) take: ``read_regular`` (lstat, judge the entry, ``open`` with O_NOFOLLOW|O_NONBLOCK,
    fstat, read) vs a plain ``open(path, "rb")`` + fstat + read;
(b) on_done delete: ``FileLifecycle.finish`` with the item's identity and SHA-256 (lstat,
    re-read and hash the file, then unlink) vs a plain unlink.

Per file size: CPU microseconds per file (process time) and the wall-clock p50 / p99 per
file, best of ``--repeat`` rounds; ratios ours / baseline. Files live in a temporary folder
(page cache warm: the agent reads files just written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.regular import LinkPolicy, read_regular
from cdml_edge.window.items import FileIdentity


def _files(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = os.urandom(size)
    paths = []
    for i in range(n):
        p = folder / f"f{i:05d}.jpg"
        p.write_bytes(data)
        paths.append(p)
    return paths


def _timed(paths: list[Path], one: Callable[[Path], object]) -> tuple[float, list[float]]:
    """CPU seconds for all files, and each file's wall-clock seconds."""
    walls = []
    cpu0 = time.process_time()
    for p in paths:
        t0 = time.perf_counter()
        one(p)
        walls.append(time.perf_counter() - t0)
    return time.process_time() - cpu0, walls


def _plain_read(p: Path) -> object:
    size = os.stat(p).st_size
    with open(p, "rb") as fh:
        os.fstat(fh.fileno())
        return fh.read(size + 1)


def _safe_read(p: Path) -> object:
    return read_regular(str(p), os.stat(p).st_size + 1, LinkPolicy())  # as the agent asks


def _figures(cpu: float, walls: list[float], n: int) -> tuple[float, float, float]:
    walls = sorted(walls)
    p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
    return cpu / n * 1e6, statistics.median(walls) * 1e6, p99 * 1e6


def bench_take(root: Path, n: int, size: int, repeat: int) -> dict[str, tuple[float, ...]]:
    paths = _files(root / f"take-{size}", n, size)
    best: dict[str, tuple[float, ...]] = {}
    for _ in range(repeat):
        for name, fn in (("plain", _plain_read), ("safe", _safe_read)):
            fig = _figures(*_timed(paths, fn), n)
            if name not in best or fig[0] < best[name][0]:
                best[name] = fig
    return best


def bench_done(root: Path, n: int, size: int, repeat: int) -> dict[str, tuple[float, ...]]:
    lc = FileLifecycle(root / "quarantine", 1 << 30)
    best: dict[str, tuple[float, ...]] = {}
    for r in range(repeat):
        for name in ("plain", "checked"):
            paths = _files(root / f"done-{size}-{name}-{r}", n, size)
            known = {p: (FileIdentity.of(os.stat(p)),
                         hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths}
            if name == "plain":
                fig = _figures(*_timed(paths, lambda p: p.unlink()), n)
            else:
                def checked(p: Path, known: dict[Path, tuple[FileIdentity, str]] = known) -> object:
                    return lc.finish(p, "delete", identity=known[p][0], sha256=known[p][1])

                fig = _figures(*_timed(paths, checked), n)
            if name not in best or fig[0] < best[name][0]:
                best[name] = fig
    return best


def _row(what: str, size: int, ours: tuple[float, ...], base: tuple[float, ...]) -> str:
    return (f"| {what} | {size // 1024} KiB | {ours[0]:.1f} | {base[0]:.1f} | "
            f"{ours[0] / base[0]:.2f} | {ours[1]:.1f} / {ours[2]:.1f} | "
            f"{base[1]:.1f} / {base[2]:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    try:
        print("| step | file | ours CPU µs/file | baseline CPU µs/file | ratio | "
              "ours p50 / p99 µs | baseline p50 / p99 µs |")
        print("|---|---|---:|---:|---:|---|---|")
        for size in sizes:
            n = max(50, min(args.files, (256 << 20) // size))
            take = bench_take(root, n, size, args.repeat)
            print(_row("take (read_regular vs open+read)", size, take["safe"], take["plain"]))
            done = bench_done(root, n, size, args.repeat)
            print(_row("on_done delete (checked vs unlink)", size, done["checked"],
                       done["plain"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
