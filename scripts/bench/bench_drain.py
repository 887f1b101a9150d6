"""Intake of a big folder: files per second draining N files present at start.

A real folder source (direct inotify reader where available) over N small files with
``on_done: keep``: each item is released as kept the moment it is taken (as the pipeline
does once its window is durable), so the figure is the intake's own cost (scan, stability
check, read, kept-file record), not decoding or scoring. Run with several ``--files`` to see
whether it is linear: the rate should not fall as N grows.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.items import Item


def _fill(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fd = os.open(folder / f"f{i:07d}.jpg", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"%07d" % i)
        os.close(fd)


def drain(n: int, base: Path, limit_s: float) -> tuple[int, float]:
    """Files taken and seconds spent (at most ``limit_s``) draining ``n`` files."""
    inbox = base / f"in{n}"
    _fill(inbox, n)
    budget = ByteBudget(10**8)
    taken = 0
    done = threading.Event()
    lock = threading.Lock()
    src: FolderSource | None = None

    def sink(item: Item) -> None:
        nonlocal taken
        assert src is not None and item.path is not None
        src.release(item.path, keep=True)
        budget.release(item.charge)
        with lock:
            taken += 1
            if taken >= n:
                done.set()

    def error(source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        print(f"error: {name}: {exc}")

    spec = FolderSpec(
        name="bench", path=inbox, modality="image", patterns=("*.jpg",), stable_seconds=0.05
    )
    src = FolderSource(spec, budget, sink, error)
    t0 = time.monotonic()
    src.start()
    done.wait(limit_s)
    elapsed = time.monotonic() - t0
    src.stop()
    return taken, elapsed


def main() -> None:
    """Print files/s for each ``--files`` count."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, nargs="+", default=[5_000, 50_000])
    ap.add_argument("--limit", type=float, default=300.0, help="seconds per size at most")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmp:
        for n in args.files:
            taken, s = drain(n, Path(tmp), args.limit)
            note = "" if taken >= n else f" (stopped after {args.limit:.0f} s)"
            print(f"{n:>8} files: {taken} taken in {s:.1f} s = {taken / s:.0f} files/s{note}")


if __name__ == "__main__":
    main()
