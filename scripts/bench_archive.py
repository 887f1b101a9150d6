"""Archive benchmark: our reader against zipfile / tarfile, figures from one run.

(a) random-order reads of 10 KB deflated members, (b) 20 KB stored members, (c) opening a
100,000-member ZIP, (d) reading 1% of a 20,000-member tar.zst at random, (e) the
single-core raw zlib-inflate and zstd-decompress rates on the same data (the ceiling).
Every figure is the best of ``--repeat`` runs. Data is generated in a temporary folder.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable

import zstandard

from cdml_edge.archive import native_available, open_archive, write_archive

WORDS = [
    "sensor",
    "line",
    "camera",
    "frame",
    "value",
    "status",
    "ok",
    "warn",
    "fault",
    "temp",
    "pressure",
    "speed",
    "torque",
    "station",
    "cycle",
    "part",
    "batch",
    "shift",
    "alarm",
    "reset",
    "motor",
    "valve",
    "flow",
    "level",
]


def text_blob(rng: random.Random, size: int) -> bytes:
    """Log-like text that deflates about 3-4x, like real CSV / JSON members."""
    out = []
    n = 0
    while n < size:
        line = (
            f"{rng.randrange(10**9)},{rng.choice(WORDS)},{rng.random():.6f},{rng.choice(WORDS)}\n"
        )
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def zip_reads(path: str, names: list[str], repeat: int) -> dict[str, float]:
    with zipfile.ZipFile(path) as zf:
        t_zip = best(lambda: [zf.read(n) for n in names], repeat)
    arc = open_archive(path)
    t_ours = best(lambda: [arc.read(n) for n in names], repeat)
    batches = [names[i : i + 64] for i in range(0, len(names), 64)]
    t_many = best(lambda: [arc.read_many(b) for b in batches], repeat)
    arc.close()
    n = len(names)
    return {"zipfile": n / t_zip, "ours_read": n / t_ours, "ours_read_many": n / t_many}


def raw_inflate(path: str, names: list[str], repeat: int) -> tuple[float, float]:
    """Members/s and MB/s of zlib inflate alone on the members' compressed bytes."""
    blobs = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for n in names:
            info = zf.getinfo(n)
            f.seek(info.header_offset)
            head = f.read(30)
            skip = (
                30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
            )
            f.seek(info.header_offset + skip)
            blobs.append(f.read(info.compress_size))
    out_bytes = sum(len(zlib.decompress(b, -15)) for b in blobs)
    t = best(lambda: [zlib.decompress(b, -15) for b in blobs], repeat)
    return len(blobs) / t, out_bytes / t / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=20000, help="members for (a), (b), (d)")
    ap.add_argument("--big", type=int, default=100000, help="members of the ZIP in (c)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(7)
    rows: list[tuple[str, str, str, str]] = []
    print(f"native core: {native_available()}")
    with tempfile.TemporaryDirectory() as tmp:
        # (a) 10 KB deflated members
        items = [(f"rec/{i:06d}.csv", text_blob(rng, 10_000)) for i in range(args.members)]
        names = [n for n, _ in items]
        order = names[:]
        rng.shuffle(order)
        za = os.path.join(tmp, "a.zip")
        with zipfile.ZipFile(za, "w", zipfile.ZIP_DEFLATED) as zf:
            for n, d in items:
                zf.writestr(n, d)
        ra = zip_reads(za, order, args.repeat)
        ceil_m, ceil_mb = raw_inflate(za, order, args.repeat)
        best_a = max(ra["ours_read"], ra["ours_read_many"])
        rows.append(
            (
                "(a) 10 KB deflated, random read()",
                f"{ra['ours_read']:,.0f}/s",
                f"{ra['zipfile']:,.0f}/s",
                f"{ra['ours_read'] / ra['zipfile']:.1f}x",
            )
        )
        rows.append(
            (
                "(a) same, read_many(64)",
                f"{ra['ours_read_many']:,.0f}/s",
                f"{ra['zipfile']:,.0f}/s",
                f"{ra['ours_read_many'] / ra['zipfile']:.1f}x",
            )
        )
        rows.append(
            (
                "(a) vs raw-inflate ceiling (e)",
                f"{best_a:,.0f}/s",
                f"{ceil_m:,.0f}/s",
                f"{best_a / ceil_m:.2f}x of ceiling",
            )
        )
        # (b) 20 KB stored members
        zb = os.path.join(tmp, "b.zip")
        with zipfile.ZipFile(zb, "w", zipfile.ZIP_STORED) as zf:
            for i in range(args.members):
                zf.writestr(f"img/{i:06d}.jpg", rng.randbytes(20_000))
        bnames = [f"img/{i:06d}.jpg" for i in range(args.members)]
        rng.shuffle(bnames)
        rb = zip_reads(zb, bnames, args.repeat)
        rows.append(
            (
                "(b) 20 KB stored, random read()",
                f"{rb['ours_read']:,.0f}/s",
                f"{rb['zipfile']:,.0f}/s",
                f"{rb['ours_read'] / rb['zipfile']:.1f}x",
            )
        )
        rows.append(
            (
                "(b) same, read_many(64)",
                f"{rb['ours_read_many']:,.0f}/s",
                f"{rb['zipfile']:,.0f}/s",
                f"{rb['ours_read_many'] / rb['zipfile']:.1f}x",
            )
        )
        # (c) open + index a 100,000-member ZIP
        zc = os.path.join(tmp, "c.zip")
        write_archive(zc, ((f"m/{i:07d}.json", b'{"v": %d}' % i) for i in range(args.big)))

        def open_zipfile() -> None:
            with zipfile.ZipFile(zc) as zf:
                zf.namelist()

        def open_ours() -> None:
            with open_archive(zc) as a:
                a.names()

        tc_zip, tc_ours = best(open_zipfile, args.repeat), best(open_ours, args.repeat)
        rows.append(
            (
                f"(c) open {args.big:,}-member ZIP",
                f"{tc_ours * 1e3:.1f} ms",
                f"{tc_zip * 1e3:.1f} ms",
                f"{tc_zip / tc_ours:.1f}x",
            )
        )
        # (d) 1% random reads from a 20,000-member tar.zst
        zd = os.path.join(tmp, "d.tar.zst")
        write_archive(zd, items)
        sample = rng.sample(names, max(1, args.members // 100))

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

        td_tar, td_ours = best(tar_baseline, args.repeat), best(ours_tar, args.repeat)
        rows.append(
            (
                f"(d) 1% of {args.members:,}-member tar.zst",
                f"{td_ours * 1e3:.1f} ms",
                f"{td_tar * 1e3:.1f} ms",
                f"{td_tar / td_ours:.1f}x",
            )
        )
        # (e) the ceiling: zstd on the same data
        with open(zd, "rb") as f:
            zraw = f.read()
        plain = (
            zstandard.ZstdDecompressor()
            .stream_reader(io.BytesIO(zraw), read_across_frames=True)
            .read()
        )
        whole = zstandard.ZstdCompressor(level=3).compress(plain)
        t_z = best(lambda: zstandard.ZstdDecompressor().decompress(whole), args.repeat)
        rows.append(
            ("(e) raw zlib inflate, 1 core", f"{ceil_mb:,.0f} MB/s", f"{ceil_m:,.0f}/s", "")
        )
        rows.append(
            ("(e) raw zstd decompress, 1 core", f"{len(plain) / t_z / 1e6:,.0f} MB/s", "", "")
        )
    w = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{w}}  {'ours':>16}  {'baseline':>14}  ratio")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>16}  {r[2]:>14}  {r[3]}")


if __name__ == "__main__":
    main()
