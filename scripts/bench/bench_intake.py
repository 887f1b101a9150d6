"""Intake hardening cost: what the safe read and the checked on_done cost per file.

Two measurements, each against a baseline measured in the same run on the same files:

(a) take: ``read_regular`` (lstat, judge the entry, ``open`` with O_NOFOLLOW|O_NONBLOCK,
    fstat, read) vs a plain ``open(path, "rb")`` + fstat + read;
(b) on_done delete: ``FileLifecycle.finish`` with the item's identity and SHA-256 vs a
    plain unlink, for a file read right after its last change (lstat, rename aside, re-read
    and hash the file, unlink) and for one read ``CTIME_SETTLE_NS`` or more after it (its
    unchanged ``st_ctime`` vouches for the content: no re-read).

Per file size: CPU microseconds per file (process time) and the wall-clock p50 / p99 per
file, best of ``--repeat`` rounds; ratios ours / baseline. Files live in a temporary folder
(page cache warm: the agent reads files just written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from timing import PerItem, each_item, per_item, rounds

from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.regular import LinkPolicy, read_regular
from cdml_edge.window.items import CTIME_SETTLE_NS, FileIdentity


def _files(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = os.urandom(size)
    paths = []
    for i in range(n):
        p = folder / f"f{i:05d}.jpg"
        p.write_bytes(data)
        paths.append(p)
    return paths


def _plain_read(p: Path) -> object:
    size = os.stat(p).st_size
    with open(p, "rb") as fh:
        os.fstat(fh.fileno())
        return fh.read(size + 1)


def _safe_read(p: Path) -> object:
    return read_regular(str(p), os.stat(p).st_size + 1, LinkPolicy())  # as the agent asks


def _least_cpu(runs: dict[str, list[PerItem]]) -> dict[str, PerItem]:
    """Each variant's round of least CPU per file (the one the machine's load hit least)."""
    return {k: min(v, key=lambda f: f.cpu) for k, v in runs.items()}


def bench_take(root: Path, n: int, size: int, repeat: int) -> dict[str, PerItem]:
    paths = _files(root / f"take-{size}", n, size)
    return _least_cpu(
        rounds(
            {
                "plain": lambda: per_item(*each_item(_plain_read, paths), n),
                "safe": lambda: per_item(*each_item(_safe_read, paths), n),
            },
            repeat,
        )
    )


def bench_done(root: Path, n: int, size: int, repeat: int) -> dict[str, PerItem]:
    lc = FileLifecycle(root / "quarantine", 1 << 30)

    def fresh(
        name: str, settled: bool = False
    ) -> tuple[list[Path], dict[Path, tuple[FileIdentity, str]]]:
        """New files to finish (the last round's are gone), their identity and digest.

        ``settled``: read ``CTIME_SETTLE_NS`` after they were written; else an identity
        without a read time, which never vouches (as at a close-write).
        """
        paths = _files(root / f"done-{size}-{name}", n, size)
        if settled:
            time.sleep(2 * CTIME_SETTLE_NS / 1e9)

        def identity(p: Path) -> FileIdentity:
            st = os.stat(p)
            return FileIdentity.read_at(st, time.time_ns()) if settled else FileIdentity.of(st)

        return paths, {p: (identity(p), hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths}

    def plain() -> PerItem:
        paths, _ = fresh("plain")
        return per_item(*each_item(lambda p: p.unlink(), paths), n)

    def checked(settled: bool) -> PerItem:
        paths, known = fresh("settled" if settled else "checked", settled)
        return per_item(
            *each_item(
                lambda p: lc.finish(p, "delete", identity=known[p][0], sha256=known[p][1]), paths
            ),
            n,
        )

    return _least_cpu(
        rounds(
            {"plain": plain, "checked": lambda: checked(False), "settled": lambda: checked(True)},
            repeat,
        )
    )


def _row(what: str, size: int, ours: PerItem, base: PerItem) -> str:
    us = 1e6
    return (
        f"| {what} | {size // 1024} KiB | {ours.cpu * us:.1f} | {base.cpu * us:.1f} | "
        f"{ours.cpu / base.cpu:.2f} | {ours.p50 * us:.1f} / {ours.p99 * us:.1f} | "
        f"{base.p50 * us:.1f} / {base.p99 * us:.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    try:
        print(
            "| step | file | ours CPU µs/file | baseline CPU µs/file | ratio | "
            "ours p50 / p99 µs | baseline p50 / p99 µs |"
        )
        print("|---|---|---:|---:|---:|---|---|")
        for size in sizes:
            n = max(50, min(args.files, (256 << 20) // size))
            take = bench_take(root, n, size, args.repeat)
            print(_row("take (read_regular vs open+read)", size, take["safe"], take["plain"]))
            done = bench_done(root, n, size, args.repeat)
            print(_row("on_done delete (checked vs unlink)", size, done["checked"], done["plain"]))
            print(_row("on_done delete, settled (vs unlink)", size, done["settled"], done["plain"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
