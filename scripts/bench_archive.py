"""Archive benchmark: our reader against zipfile / tarfile, figures from one run.

(a) random-order reads of 10 KB deflated members, (b) 20 KB stored members, (c) opening a
100,000-member ZIP, (d) reading 1% of a 20,000-member tar.zst at random, (e) the
single-core raw zlib-inflate and zstd-decompress rates on the same data (the ceiling).
(a) runs on two kinds of member: JSON sensor records (deflate ~6x, the common case) and
dense random-digit CSV (deflate ~2x, where inflate itself dominates). Every figure is the
best of ``--repeat`` rounds, and the rounds interleave ours and the baseline so both see
the same machine load; data is generated in a temporary folder.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import tarfile
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable

import zstandard

from cdml_edge.archive import open_archive, write_archive
from cdml_edge.archive.native import describe

SENSORS = [f"{kind}-{i:02d}" for kind in ("temp", "press", "flow", "vib") for i in range(8)]
STATES = ["ok", "ok", "ok", "ok", "warn", "fault"]


def json_blob(rng: random.Random, size: int) -> bytes:
    """JSON-lines sensor records, as a window of sensor readings looks."""
    out: list[str] = []
    n = 0
    ts = 1_700_000_000.0 + rng.random() * 1e6
    while n < size:
        ts += 0.01
        line = (
            f'{{"ts": {ts:.2f}, "sensor": "{rng.choice(SENSORS)}", '
            f'"value": {rng.gauss(20, 2):.2f}, "status": "{rng.choice(STATES)}"}}\n'
        )
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]


def csv_blob(rng: random.Random, size: int) -> bytes:
    """Dense CSV of random numbers: deflates only ~2x, inflate time dominates."""
    out: list[str] = []
    n = 0
    while n < size:
        line = f"{rng.randrange(10**9)},{rng.random():.6f},{rng.randrange(10**6)}\n"
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]


def best(fn: Callable[[], object], repeat: int) -> float:
    return race({"x": fn}, repeat)["x"]


def race(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each function; rounds interleave them so all see the same machine load."""
    out = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k] = min(out[k], time.perf_counter() - t0)
    return out


def two_threads(arc: object, batches: list[list[str]]) -> None:
    halves = [batches[0::2], batches[1::2]]

    def run(part: list[list[str]]) -> None:
        for b in part:
            arc.read_many(b)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(h,)) for h in halves]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def streamed(read: Callable[[str], bytes], names: list[str]) -> None:
    """Each result used (its length) and dropped at once, as a data loader does."""
    total = 0
    for n in names:
        total += len(read(n))


def data_ranges(path: str, names: list[str]) -> list[tuple[int, int]]:
    """(offset, length) of each member's data in the file."""
    out = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for n in names:
            info = zf.getinfo(n)
            f.seek(info.header_offset)
            head = f.read(30)
            skip = 30 + int.from_bytes(head[26:28], "little")
            skip += int.from_bytes(head[28:30], "little")
            out.append((info.header_offset + skip, info.compress_size))
    return out


def zip_reads(
    path: str,
    names: list[str],
    repeat: int,
    blobs: list[bytes] | None = None,
    floor: bool = False,
) -> dict[str, float]:
    """Members/s of zipfile, our read(), read_many(64), 2 threads, and raw inflate.

    The list rounds keep every result alive until the round ends (so each one lands on
    fresh memory pages); the ``*_stream`` rounds drop each result as soon as it is used.
    """
    zf = zipfile.ZipFile(path)
    arc = open_archive(path)
    batches = [names[i : i + 64] for i in range(0, len(names), 64)]
    fns: dict[str, Callable[[], object]] = {
        "zipfile": lambda: [zf.read(n) for n in names],
        "read": lambda: [arc.read(n) for n in names],
        "many": lambda: [arc.read_many(b) for b in batches],
        "two": lambda: two_threads(arc, batches),
        "zipfile_stream": lambda: streamed(zf.read, names),
        "read_stream": lambda: streamed(arc.read, names),
    }
    if blobs is not None:
        fns["raw"] = lambda: [zlib.decompress(b, -15) for b in blobs]
    fd = os.open(path, os.O_RDONLY)
    if floor:  # one os.pread of the data into a fresh bytes object: no header, no CRC
        ranges = data_ranges(path, names)
        fns["floor"] = lambda: [os.pread(fd, n, o) for o, n in ranges]
    times = race(fns, repeat)
    os.close(fd)
    arc.close()
    zf.close()
    return {k: len(names) / t for k, t in times.items()}


def compressed_blobs(path: str, names: list[str]) -> tuple[list[bytes], float]:
    """The members' raw deflate streams (for the inflate ceiling) and the mean ratio."""
    blobs = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for n in names:
            info = zf.getinfo(n)
            f.seek(info.header_offset)
            head = f.read(30)
            skip = 30 + int.from_bytes(head[26:28], "little")
            skip += int.from_bytes(head[28:30], "little")
            f.seek(info.header_offset + skip)
            blobs.append(f.read(info.compress_size))
    out_bytes = sum(len(zlib.decompress(b, -15)) for b in blobs)
    return blobs, out_bytes / sum(len(b) for b in blobs)


Row = tuple[str, str, str, str]


def stream_row(label: str, r: dict[str, float]) -> Row:
    z = r["zipfile_stream"]
    return (label, f"{r['read_stream']:,.0f}/s", f"{z:,.0f}/s", f"{r['read_stream'] / z:.1f}x")


def bench_deflated(
    tmp: str, label: str, make: Callable[[random.Random, int], bytes], args: argparse.Namespace
) -> tuple[list[Row], list[tuple[str, bytes]]]:
    rng = random.Random(7)
    items = [(f"rec/{i:06d}.json", make(rng, 10_000)) for i in range(args.members)]
    order = rng.sample([n for n, _ in items], min(args.reads, len(items)))
    path = os.path.join(tmp, f"a-{label}.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in items:
            zf.writestr(n, d)
    blobs, ratio = compressed_blobs(path, order)
    r = zip_reads(path, order, args.repeat, blobs)
    ceil_m = r["raw"]
    ceil_mb = ceil_m * 10_000 / 1e6
    z = r["zipfile"]
    rows: list[Row] = [
        (
            f"(a) 10 KB deflated {label} ({ratio:.1f}x), read()",
            f"{r['read']:,.0f}/s",
            f"{z:,.0f}/s",
            f"{r['read'] / z:.1f}x",
        ),
        ("(a) same, read_many(64)", f"{r['many']:,.0f}/s", f"{z:,.0f}/s", f"{r['many'] / z:.1f}x"),
        stream_row("(a) same, read(), each result dropped after use", r),
        (
            "(a) same, read_many(64), 2 threads",
            f"{r['two']:,.0f}/s",
            f"{z:,.0f}/s",
            f"{r['two'] / z:.1f}x",
        ),
        (
            f"(e) raw zlib inflate, 1 core, {label}",
            f"{ceil_m:,.0f}/s",
            f"{ceil_mb:,.0f} MB/s",
            f"read_many = {r['many'] / ceil_m:.2f} of it",
        ),
    ]
    return rows, items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=20000, help="members for (a), (b), (d)")
    ap.add_argument("--big", type=int, default=100000, help="members of the ZIP in (c)")
    ap.add_argument("--reads", type=int, default=5000, help="random reads timed in (a), (b)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="(a), (b) and (e) only")
    args = ap.parse_args()
    rng = random.Random(7)
    rows: list[Row] = []
    print(f"reader: {describe()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        json_rows, items = bench_deflated(tmp, "JSON", json_blob, args)
        csv_rows, _ = bench_deflated(tmp, "CSV", csv_blob, args)
        rows += json_rows + csv_rows
        # (b) 20 KB stored members
        zb = os.path.join(tmp, "b.zip")
        with zipfile.ZipFile(zb, "w", zipfile.ZIP_STORED) as zf:
            for i in range(args.members):
                zf.writestr(f"img/{i:06d}.jpg", rng.randbytes(20_000))
        bnames = rng.sample([f"img/{i:06d}.jpg" for i in range(args.members)], args.reads)
        rb = zip_reads(zb, bnames, args.repeat, floor=True)
        z = rb["zipfile"]
        rows.append(
            (
                "(b) 20 KB stored, read()",
                f"{rb['read']:,.0f}/s",
                f"{z:,.0f}/s",
                f"{rb['read'] / z:.1f}x",
            )
        )
        rows.append(
            (
                "(b) same, read_many(64)",
                f"{rb['many']:,.0f}/s",
                f"{z:,.0f}/s",
                f"{rb['many'] / z:.1f}x",
            )
        )
        rows.append(stream_row("(b) same, read(), each result dropped after use", rb))
        rows.append(
            (
                "(b) floor: bare os.pread of the data, no CRC",
                f"{rb['floor']:,.0f}/s",
                f"{z:,.0f}/s",
                f"{rb['floor'] / z:.1f}x",
            )
        )
        if args.quick:
            print_rows(rows)
            return
        # (c) open + index a 100,000-member ZIP
        zc = os.path.join(tmp, "c.zip")
        write_archive(zc, ((f"m/{i:07d}.json", b'{"v": %d}' % i) for i in range(args.big)))

        def open_zipfile() -> None:
            with zipfile.ZipFile(zc) as zf:
                zf.namelist()

        def open_ours() -> None:
            with open_archive(zc) as a:
                a.names()

        tc = race({"zipfile": open_zipfile, "ours": open_ours}, args.repeat)
        tc_zip, tc_ours = tc["zipfile"], tc["ours"]
        rows.append(
            (
                f"(c) open {args.big:,}-member ZIP",
                f"{tc_ours * 1e3:.1f} ms",
                f"{tc_zip * 1e3:.1f} ms",
                f"{tc_zip / tc_ours:.1f}x",
            )
        )
        # (d) 1% random reads from a 20,000-member tar.zst (the JSON members of (a))
        zd = os.path.join(tmp, "d.tar.zst")
        write_archive(zd, items)
        names = [n for n, _ in items]
        sample = rng.sample(names, max(1, len(names) // 100))

        def tar_baseline() -> None:
            want = set(sample)
            got = {}
            with open(zd, "rb") as f:
                stream = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
                with tarfile.open(fileobj=stream, mode="r|") as tf:
                    for m in tf:
                        if m.name in want:
                            got[m.name] = tf.extractfile(m).read()  # type: ignore[union-attr]
                            if len(got) == len(want):
                                break

        def ours_tar() -> None:
            with open_archive(zd) as a:
                for n in sample:
                    a.read(n)

        td = race({"tarfile": tar_baseline, "ours": ours_tar}, args.repeat)
        td_tar, td_ours = td["tarfile"], td["ours"]
        rows.append(
            (
                f"(d) open + read 1% of {len(names):,}-member tar.zst",
                f"{td_ours * 1e3:.1f} ms",
                f"{td_tar * 1e3:.1f} ms",
                f"{td_tar / td_ours:.1f}x",
            )
        )
        # (e) zstd on the same data, one frame, one core
        with open(zd, "rb") as f:
            raw = f.read()
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(raw), read_across_frames=True
        )
        plain = reader.read()
        whole = zstandard.ZstdCompressor(level=3).compress(plain)
        t_z = best(lambda: zstandard.ZstdDecompressor().decompress(whole), args.repeat)
        rows.append(
            ("(e) raw zstd decompress, 1 core, JSON", f"{len(plain) / t_z / 1e6:,.0f} MB/s", "", "")
        )
    print_rows(rows)


def print_rows(rows: list[Row]) -> None:
    w = max(len(r[0]) for r in rows)
    print(f"| {'benchmark':<{w}} | {'ours':>14} | {'baseline':>14} | ratio |")
    print(f"|{'-' * (w + 2)}|{'-' * 16}|{'-' * 16}|-------|")
    for r in rows:
        print(f"| {r[0]:<{w}} | {r[1]:>14} | {r[2]:>14} | {r[3]} |")


if __name__ == "__main__":
    main()
