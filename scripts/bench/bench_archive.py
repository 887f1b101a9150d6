"""Archive benchmark: our reader against zipfile / tarfile, figures from one run.

(a) random-order reads of 10 KB deflated members, (b) 20 KB stored members, (c) opening a
100,000-member ZIP, (d) reading 1% of a 20,000-member tar.zst at random, (e) the
single-core raw zlib-inflate and zstd-decompress rates on the same data (the ceiling),
(f) our seekable tar.zst next to our ZIP and zipfile on the same members (10 KB CSV, 20 KB
JPEG: random ``read()``, ``read_many``, sequential ``read()``, CPU per read, size), (g) the
seed's case: open and read 200 x 10 KB members. ``--frame-sweep`` measures tar.zst frame
sizes (compression against read speed), the figures the packer's default comes from.
(a) and (b) also read batches into an :class:`~cdml_edge.archive.Arena` (one reused buffer),
and (b) measures two floors: a bare ``os.pread`` of each member's data into fresh ``bytes``,
and a bare ``os.preadv`` into one reused buffer (no header, no CRC).
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
import zipfile
import zlib
from collections.abc import Callable

import zstandard
from timing import best_of, interleaved, load_average, ratio

from cdml_edge.archive import Arena, open_archive, write_archive
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


def jpeg_blobs(rng: random.Random, n: int) -> list[bytes]:
    """``n`` camera-like JPEGs of about 20 KB (gradients and sensor noise, quality 85)."""
    import cv2
    import numpy as np

    noise = np.random.default_rng(rng.randrange(1 << 30))
    y, x = np.mgrid[0:192, 0:256]
    out = []
    for i in range(n):
        gradient = (np.stack([x * 1.5 + i, y * 2.0, x + y], -1) % 256).astype(np.uint8)
        img = cv2.add(gradient, noise.integers(0, 64, gradient.shape, dtype=np.uint8))
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])
        out.append(buf.tobytes())
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
    """(offset, length) of each member's (compressed) data in the file."""
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

    read_many(64) both into fresh bytes and into an arena.

    The list rounds keep every result alive until the round ends (so each one lands on
    fresh memory pages); the ``*_stream`` rounds drop each result as soon as it is used;
    the arena round reads each batch into the same reused buffer (a batch is used before
    the next one is read, as a data loader does).
    """
    zf = zipfile.ZipFile(path)
    arc = open_archive(path)
    arena = Arena()
    batches = [names[i : i + 64] for i in range(0, len(names), 64)]
    fns: dict[str, Callable[[], object]] = {
        "zipfile": lambda: [zf.read(n) for n in names],
        "read": lambda: [arc.read(n) for n in names],
        "many": lambda: [arc.read_many(b) for b in batches],
        "arena": lambda: [arc.read_many(b, arena=arena) for b in batches],
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
        # the same into one reused buffer (the arena's floor: no fresh pages, no CRC)
        reused = memoryview(bytearray(max(n for _, n in ranges)))
        fns["floor_reused"] = lambda: [os.preadv(fd, [reused[:n]], o) for o, n in ranges]
    times = {k: t.wall for k, t in interleaved(fns, repeat).items()}
    os.close(fd)
    arc.close()
    zf.close()
    return {k: len(names) / t for k, t in times.items()}


def compressed_blobs(path: str, names: list[str]) -> tuple[list[bytes], float]:
    """The members' raw deflate streams (for the inflate ceiling) and the mean ratio."""
    with open(path, "rb") as f:
        blobs = [os.pread(f.fileno(), n, o) for o, n in data_ranges(path, names)]
    out_bytes = sum(len(zlib.decompress(b, -15)) for b in blobs)
    return blobs, out_bytes / sum(len(b) for b in blobs)


Row = tuple[str, str, str, str]


def rate_row(label: str, ours: float, base: float) -> Row:
    """Members/s of ours against a baseline from the same race."""
    return (label, f"{ours:,.0f}/s", f"{base:,.0f}/s", ratio(ours, base, 1))


def time_row(label: str, ours: float, base: float, digits: int = 1) -> Row:
    """Seconds (shown in ms) of ours against a baseline; the ratio is the speed-up."""
    return (
        label,
        f"{ours * 1e3:.{digits}f} ms",
        f"{base * 1e3:.{digits}f} ms",
        ratio(base, ours, digits),
    )


def stream_row(label: str, r: dict[str, float]) -> Row:
    return rate_row(label, r["read_stream"], r["zipfile_stream"])


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
    blobs, factor = compressed_blobs(path, order)
    r = zip_reads(path, order, args.repeat, blobs)
    ceil_m = r["raw"]
    ceil_mb = ceil_m * 10_000 / 1e6
    z = r["zipfile"]
    rows: list[Row] = [
        rate_row(f"(a) 10 KB deflated {label} ({factor:.1f}x), read()", r["read"], z),
        rate_row("(a) same, read_many(64)", r["many"], z),
        rate_row("(a) same, read_many(64) into an arena", r["arena"], z),
        stream_row("(a) same, read(), each result dropped after use", r),
        rate_row("(a) same, read_many(64), 2 threads", r["two"], z),
        (
            f"(e) raw zlib inflate, 1 core, {label}",
            f"{ceil_m:,.0f}/s",
            f"{ceil_mb:,.0f} MB/s",
            f"read_many = {r['many'] / ceil_m:.2f}, arena = {r['arena'] / ceil_m:.2f} of it",
        ),
    ]
    return rows, items


def c_core_us(z: object, t: object, order: list[str], repeat: int) -> tuple[float, float]:
    """µs of CPU per member in the C core alone (outputs reused, no Python around each call).

    A tar.zst member's frame read and decoded, a ZIP member read and inflated.
    """
    from bisect import bisect_right

    from cdml_edge.archive._native._reader import ffi, lib

    f, x = t._frames, t._members.index  # type: ignore[attr-defined]
    ids = [t._ids[n] for n in order]  # type: ignore[attr-defined]
    zids = [z._ids[n] for n in order]  # type: ignore[attr-defined]
    outs = [ffi.from_buffer("uint8_t[]", bytearray(x.sizes[i])) for i in ids]
    ks = [bisect_right(f.doff, x.data_offsets[i]) - 1 for i in ids]
    tfd, zfd = t.source.fileno(), z.source.fileno()  # type: ignore[attr-defined]
    zidx, zsize = z._native_index._idx, z.source.size()  # type: ignore[attr-defined]
    c, d, null = f.coff, f.doff, ffi.NULL

    def tzst() -> None:
        for i, k, out in zip(ids, ks, outs, strict=True):
            lib.cz_zstd_read_one(
                tfd, null, 0, c[k], c[k + 1] - c[k], d[k], d[k + 1] - d[k], null,
                x.data_offsets[i], x.sizes[i], x.crcs[i] or 0, x.crcs[i] is not None, out, null,
            )  # fmt: skip

    def zip_() -> None:
        for i, out in zip(zids, outs, strict=True):
            lib.cz_read_one_fd(zidx, zfd, zsize, i, out)

    r = interleaved({"t": tzst, "z": zip_}, repeat)
    return r["t"].cpu / len(order) * 1e6, r["z"].cpu / len(order) * 1e6


def tarzst_rows(
    tmp: str, label: str, items: list[tuple[str, bytes]], args: argparse.Namespace, level: int = 3
) -> list[Row]:
    """(f): our tar.zst against our ZIP and zipfile on the same members, one race."""
    kw = {} if args.frame_bytes is None else {"frame_bytes": args.frame_bytes}
    zpath, tpath = os.path.join(tmp, f"f-{label}.zip"), os.path.join(tmp, f"f-{label}.tar.zst")
    write_archive(zpath, items)
    write_archive(tpath, items, level=level, **kw)
    names = [n for n, _ in items]
    order = random.Random(11).sample(names, len(names))
    batches = [order[i : i + 64] for i in range(0, len(order), 64)]
    zf, z, t = zipfile.ZipFile(zpath), open_archive(zpath), open_archive(tpath)
    fns: dict[str, Callable[[], object]] = {
        "zip": lambda: [z.read(n) for n in order],
        "tzst": lambda: [t.read(n) for n in order],
        "zip_many": lambda: [z.read_many(b) for b in batches],
        "tzst_many": lambda: [t.read_many(b) for b in batches],
    }
    if level == 3:
        fns |= {
            "zipfile": lambda: [zf.read(n) for n in order],
            "zip_two": lambda: two_threads(z, batches),
            "tzst_two": lambda: two_threads(t, batches),
            "zip_seq": lambda: [z.read(n) for n in names],
            "tzst_seq": lambda: [t.read(n) for n in names],
            "zipfile_seq": lambda: [zf.read(n) for n in names],
        }
    r = interleaved(fns, args.repeat)
    n = len(names)
    rate = {k: n / v.wall for k, v in r.items()}
    cpu = {k: v.cpu / n * 1e6 for k, v in r.items()}
    c_t, c_z = c_core_us(z, t, order, args.repeat) if level == 3 else (0.0, 0.0)
    zsize, tsize = os.path.getsize(zpath), os.path.getsize(tpath)
    for a in (z, t):
        a.close()
    zf.close()

    def vs(what: str, a: str, b: str) -> Row:
        return (what, f"{rate[a]:,.0f}/s", f"{rate[b]:,.0f}/s", ratio(rate[a], rate[b]))

    def us(what: str, a: float, b: float) -> Row:
        return (what, f"{a:.1f} µs", f"{b:.1f} µs", ratio(b, a))

    if level != 3:
        return [
            vs(f"(f) same, zstd level {level}: random read(), tar.zst vs our ZIP", "tzst", "zip"),
            vs(f"(f) same, zstd level {level}: read_many(64)", "tzst_many", "zip_many"),
            (f"(f) same, zstd level {level}: archive size", f"{tsize / 1e6:.2f} MB",
             f"{zsize / 1e6:.2f} MB", f"{tsize / zsize:.2f} of it"),
        ]  # fmt: skip
    mean = sum(len(d) for _, d in items) // n
    return [
        vs(
            f"(f) {n:,} x {mean / 1000:.0f} KB {label}: random read(), tar.zst vs our ZIP",
            "tzst",
            "zip",
        ),  # fmt: skip
        vs("(f) same, random read(), tar.zst vs zipfile", "tzst", "zipfile"),
        vs("(f) same, read_many(64), tar.zst vs our ZIP", "tzst_many", "zip_many"),
        vs("(f) same, read_many(64), 2 threads, tar.zst vs our ZIP", "tzst_two", "zip_two"),
        vs("(f) same, sequential read(), tar.zst vs our ZIP", "tzst_seq", "zip_seq"),
        vs("(f) same, sequential read(), tar.zst vs zipfile", "tzst_seq", "zipfile_seq"),
        us("(f) same, CPU per random read(), tar.zst vs our ZIP", cpu["tzst"], cpu["zip"]),
        us("(f) same, CPU per member in read_many(64)", cpu["tzst_many"], cpu["zip_many"]),
        us("(f) same, C core alone per member (decode vs inflate)", c_t, c_z),
        (
            "(f) same, archive size, tar.zst vs our ZIP",
            f"{tsize / 1e6:.2f} MB",
            f"{zsize / 1e6:.2f} MB",
            f"{tsize / zsize:.2f} of it",
        ),  # fmt: skip
    ]


def seed_rows(tmp: str, repeat: int) -> list[Row]:
    """(g) the seed's case: open a 200 x 10 KB archive and read every member."""
    rng = random.Random(5)
    items = [(f"s/{i:03d}.csv", csv_blob(rng, 10_000)) for i in range(200)]
    names = rng.sample([n for n, _ in items], len(items))
    paths = {}
    for fmt in ("zip", "tar.zst"):
        paths[fmt] = os.path.join(tmp, f"seed.{fmt}")
        write_archive(paths[fmt], items)

    def read_each(fmt: str) -> None:
        with open_archive(paths[fmt]) as a:
            for n in names:
                a.read(n)

    def read_all(fmt: str) -> None:
        with open_archive(paths[fmt]) as a:
            a.read_many(names)

    t = interleaved(
        {
            "zip": lambda: read_each("zip"),
            "tzst": lambda: read_each("tar.zst"),
            "zip_many": lambda: read_all("zip"),
            "tzst_many": lambda: read_all("tar.zst"),
        },
        repeat * 4,
    )
    r = {k: v.wall for k, v in t.items()}
    return [
        time_row(
            "(g) seed: open + read() 200 x 10 KB CSV, tar.zst vs our ZIP",
            r["tzst"],
            r["zip"],
            digits=2,
        ),
        time_row("(g) same, open + one read_many(200)", r["tzst_many"], r["zip_many"], digits=2),
    ]


def tarzst_section(tmp: str, args: argparse.Namespace) -> list[Row]:
    """(f) on 10 KB CSV and 20 KB JPEG members, then (g)."""
    rng = random.Random(3)
    n = args.tar_members
    csv = [(f"csv/{i:05d}.csv", csv_blob(rng, 10_000)) for i in range(n)]
    jpg = [(f"cam/{i:05d}.jpg", b) for i, b in enumerate(jpeg_blobs(rng, n))]
    rows = tarzst_rows(tmp, "CSV", csv, args)
    rows += tarzst_rows(tmp, "CSV-1", csv, args, level=1)
    rows += tarzst_rows(tmp, "JPEG", jpg, args)
    return rows + seed_rows(tmp, args.repeat)


def sweep_race(
    zpath: str, tpath: str, names: list[str], order: list[str], repeat: int
) -> tuple[dict[str, float], int]:
    """CPU times of our ZIP and tar.zst: random read(), read_many(64), sequential; frames."""
    batches = [order[i : i + 64] for i in range(0, len(order), 64)]
    z, t = open_archive(zpath), open_archive(tpath)
    r = interleaved(
        {
            "zr": lambda: [z.read(x) for x in order],
            "tr": lambda: [t.read(x) for x in order],
            "zm": lambda: [z.read_many(b) for b in batches],
            "tm": lambda: [t.read_many(b) for b in batches],
            "zs": lambda: [z.read(x) for x in names],
            "ts": lambda: [t.read(x) for x in names],
        },
        repeat,
    )
    frames = int(t._frames.count)  # type: ignore[attr-defined]
    z.close()
    t.close()
    return {k: t.cpu for k, t in r.items()}, frames


SWEEP = (4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10)


def frame_sweep(tmp: str, args: argparse.Namespace) -> None:
    """tar.zst frame sizes: compression against random / batched / sequential reads.

    Each size is raced against our ZIP of the same members (ratios from one run). The
    figures are CPU time, which a loaded machine disturbs less than wall time.
    """
    rng = random.Random(3)
    n = args.tar_members
    sets = {
        "10 KB CSV": [(f"csv/{i:05d}.csv", csv_blob(rng, 10_000)) for i in range(n)],
        "20 KB JPEG": [(f"cam/{i:05d}.jpg", b) for i, b in enumerate(jpeg_blobs(rng, n))],
        "1 KB JSON": [(f"j/{i:05d}.json", json_blob(rng, 1_000)) for i in range(5 * n)],
    }
    print(
        "| members | frame | frames | size vs ZIP | read() vs ZIP | read_many vs ZIP | "
        "sequential vs ZIP |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, items in sets.items():
        names = [nm for nm, _ in items]
        order = random.Random(11).sample(names, len(names))
        zpath = os.path.join(tmp, "sweep.zip")
        write_archive(zpath, items)
        for fb in SWEEP:
            tpath = os.path.join(tmp, "sweep.tar.zst")
            write_archive(tpath, items, frame_bytes=fb)
            r, frames = sweep_race(zpath, tpath, names, order, args.repeat)
            size = os.path.getsize(tpath) / os.path.getsize(zpath)
            print(
                f"| {label} | {fb >> 10} KiB | {frames:,} | {size:.2f} | {r['zr'] / r['tr']:.2f}x "
                f"| {r['zm'] / r['tm']:.2f}x | {r['zs'] / r['ts']:.2f}x |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=20000, help="members for (a), (b), (d)")
    ap.add_argument("--big", type=int, default=100000, help="members of the ZIP in (c)")
    ap.add_argument("--reads", type=int, default=5000, help="random reads timed in (a), (b)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="(a), (b) and (e) only")
    ap.add_argument("--tar-members", type=int, default=2000, help="members per archive in (f)")
    ap.add_argument("--frame-bytes", type=int, default=None, help="tar.zst frame size in (f)")
    ap.add_argument("--only-tarzst", action="store_true", help="(f) and (g) only")
    ap.add_argument("--frame-sweep", action="store_true", help="tar.zst frame sizes only")
    args = ap.parse_args()
    rng = random.Random(7)
    rows: list[Row] = []
    print(f"reader: {describe()}, {os.cpu_count()} CPUs, load average {load_average():.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.frame_sweep:
            frame_sweep(tmp, args)
            return
        if args.only_tarzst:
            print_rows(tarzst_section(tmp, args))
            return
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
        rows += [
            rate_row("(b) 20 KB stored, read()", rb["read"], z),
            rate_row("(b) same, read_many(64)", rb["many"], z),
            rate_row("(b) same, read_many(64) into an arena", rb["arena"], z),
            stream_row("(b) same, read(), each result dropped after use", rb),
            rate_row("(b) floor: bare os.pread of the data, no CRC", rb["floor"], z),
            rate_row(
                "(b) arena floor: bare os.preadv into one reused buffer, no CRC",
                rb["floor_reused"],
                z,
            ),
        ]
        rows.append(
            (
                "(b) read_many(64) into an arena vs the arena floor",
                f"{rb['arena']:,.0f}/s",
                f"{rb['floor_reused']:,.0f}/s",
                f"{rb['arena'] / rb['floor_reused']:.2f} of it",
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

        tc = interleaved({"zipfile": open_zipfile, "ours": open_ours}, args.repeat)
        tc_zip, tc_ours = tc["zipfile"].wall, tc["ours"].wall
        rows.append(time_row(f"(c) open {args.big:,}-member ZIP", tc_ours, tc_zip))
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

        td = interleaved({"tarfile": tar_baseline, "ours": ours_tar}, args.repeat)
        td_tar, td_ours = td["tarfile"].wall, td["ours"].wall
        rows.append(
            time_row(f"(d) open + read 1% of {len(names):,}-member tar.zst", td_ours, td_tar)
        )
        # (e) zstd on the same data, one frame, one core
        with open(zd, "rb") as f:
            raw = f.read()
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(raw), read_across_frames=True
        )
        plain = reader.read()
        whole = zstandard.ZstdCompressor(level=3).compress(plain)
        t_z = best_of(lambda: zstandard.ZstdDecompressor().decompress(whole), args.repeat).wall
        rows.append(
            ("(e) raw zstd decompress, 1 core, JSON", f"{len(plain) / t_z / 1e6:,.0f} MB/s", "", "")
        )
        rows += tarzst_section(tmp, args)
    print_rows(rows)


def print_rows(rows: list[Row]) -> None:
    w = max(len(r[0]) for r in rows)
    print(f"| {'benchmark':<{w}} | {'ours':>14} | {'baseline':>14} | ratio |")
    print(f"|{'-' * (w + 2)}|{'-' * 16}|{'-' * 16}|-------|")
    for r in rows:
        print(f"| {r[0]:<{w}} | {r[1]:>14} | {r[2]:>14} | {r[3]} |")


if __name__ == "__main__":
    main()
