"""The Python live API's cost: ``watch_in_memory`` / ``watch_and_pack`` against a bare watchdog.

Files of ``--size`` bytes are dropped into a folder as a camera does (write ``.part``, then
rename) at ``--rate`` files/s. Two rows, each with a baseline measured in the same run on the
same files:

(a) per file: ``watch_in_memory`` (the agent's folder source: stable-file judging, regular
    files only, byte budget, windower in instant mode, one callback thread) vs a bare
    watchdog observer whose handler reads the renamed file and calls the callback;
(b) per batch: ``watch_and_pack`` (ZIP in memory with ``manifest.json`` and each member's
    SHA-256, ``interval_seconds=0.5``) vs the bare observer collecting files and writing
    them into a ``zipfile.ZipFile`` in memory every 0.5 s (stored, as ours stores JPEGs).

Figures: CPU microseconds per file (process time of the whole process, the dropper
included, so both sides carry the same dropper), and the wall-clock latency from the rename
to the callback, p50 / p99, in milliseconds.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from timing import PerItem, per_item, rounds
from watchdog.events import FileMovedEvent, FileSystemEventHandler
from watchdog.observers import Observer

from cdml_edge.live import PackedBatch, watch_and_pack, watch_in_memory

# A row's variant: folder -> start(done) -> stop.
Starter = Callable[[Path], Callable[[Callable[[str], None]], Callable[[], None]]]


class _Bare(FileSystemEventHandler):
    def __init__(self, on_file: Callable[[str, bytes], None]) -> None:
        self.on_file = on_file

    def on_moved(self, event: FileMovedEvent) -> None:  # type: ignore[override]
        path = os.fsdecode(event.dest_path)
        with open(path, "rb") as fh:
            self.on_file(path, fh.read())


def _drop(folder: Path, n: int, size: int, rate: float, sent: dict[str, float]) -> None:
    data = os.urandom(size)
    for i in range(n):
        name = f"f{i:05d}.jpg"
        tmp = folder / f"{name}.part"
        tmp.write_bytes(data)
        sent[name] = time.perf_counter()
        os.replace(tmp, folder / name)
        time.sleep(1.0 / rate)


def _run(
    folder: Path,
    n: int,
    size: int,
    rate: float,
    start: Callable[[Callable[[str], None]], Callable[[], None]],
) -> tuple[float, list[float]]:
    """Start a watcher (``start(done) -> stop``), drop the files, wait for every ``done``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sent: dict[str, float] = {}
    lat: list[float] = []
    all_done = threading.Event()

    def done(path: str) -> None:
        lat.append(time.perf_counter() - sent[Path(path).name])
        if len(lat) == n:
            all_done.set()

    stop = start(done)
    time.sleep(0.5)
    cpu0 = time.process_time()
    _drop(folder, n, size, rate, sent)
    all_done.wait(60)
    cpu = time.process_time() - cpu0
    stop()
    return cpu, lat


def _in_memory(folder: Path) -> Callable[[Callable[[str], None]], Callable[[], None]]:
    def start(done: Callable[[str], None]) -> Callable[[], None]:
        w = watch_in_memory(
            folder, lambda p, kind, data: done(p), with_data=True, auto_delete=True, background=True
        )

        def stop() -> None:
            w.stop()

        return stop

    return start


def _bare_file(folder: Path) -> Callable[[Callable[[str], None]], Callable[[], None]]:
    def start(done: Callable[[str], None]) -> Callable[[], None]:
        def on_file(path: str, data: bytes) -> None:
            done(path)
            os.unlink(path)

        obs = Observer()
        obs.schedule(_Bare(on_file), str(folder))
        obs.start()

        def stop() -> None:
            obs.stop()
            obs.join()

        return stop

    return start


def _packed(folder: Path) -> Callable[[Callable[[str], None]], Callable[[], None]]:
    def start(done: Callable[[str], None]) -> Callable[[], None]:
        def on_batch(batch: PackedBatch) -> None:
            for p in batch.files:
                done(str(p))

        w = watch_and_pack(
            folder, None, on_batch, interval_seconds=0.5, auto_delete=True, background=True
        )

        def stop() -> None:
            w.stop()

        return stop

    return start


def _bare_zip(folder: Path) -> Callable[[Callable[[str], None]], Callable[[], None]]:
    def start(done: Callable[[str], None]) -> Callable[[], None]:
        pending: list[tuple[str, bytes]] = []
        lock = threading.Lock()
        stopped = threading.Event()

        def packer() -> None:
            while not stopped.wait(0.5):
                with lock:
                    batch, pending[:] = list(pending), []
                if batch:
                    buf = io.BytesIO()
                    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
                        for path, data in batch:
                            zf.writestr(Path(path).name, data)
                    for path, _ in batch:
                        done(path)
                        os.unlink(path)

        def on_file(path: str, data: bytes) -> None:
            with lock:
                pending.append((path, data))

        obs = Observer()
        obs.schedule(_Bare(on_file), str(folder))
        obs.start()
        t = threading.Thread(target=packer, daemon=True)
        t.start()

        def stop() -> None:
            stopped.set()
            t.join()
            obs.stop()
            obs.join()

        return stop

    return start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-live-"))
    rows = (
        ("(a) per file: watch_in_memory vs watchdog + read", _in_memory, _bare_file),
        ("(b) per batch: watch_and_pack vs watchdog + zipfile", _packed, _bare_zip),
    )
    try:
        print(
            f"{args.files} files of {args.size // 1024} KiB at {args.rate:g}/s, best of "
            f"{args.repeat}"
        )
        print(
            "| row | ours CPU µs/file | baseline CPU µs/file | ratio | ours p50 / p99 ms | "
            "baseline p50 / p99 ms |"
        )
        print("|---|---:|---:|---:|---|---|")

        def one(name: str, fn: Starter) -> Callable[[], PerItem]:
            folder = root / name
            return lambda: per_item(
                *_run(folder, args.files, args.size, args.rate, fn(folder)), args.files
            )

        for what, ours_fn, base_fn in rows:
            runs = rounds({"ours": one("ours", ours_fn), "base": one("base", base_fn)}, args.repeat)
            # each side's round of least CPU per file
            o, b = (min(runs[k], key=lambda f: f.cpu) for k in ("ours", "base"))
            print(
                f"| {what} | {o.cpu * 1e6:.0f} | {b.cpu * 1e6:.0f} | {o.cpu / b.cpu:.2f} | "
                f"{o.p50 * 1e3:.1f} / {o.p99 * 1e3:.1f} | "
                f"{b.p50 * 1e3:.1f} / {b.p99 * 1e3:.1f} |"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
