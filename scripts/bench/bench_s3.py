"""S3 benchmark: random reads from a ZIP, ours against s3fs + zipfile; time to a first batch.

Random reads of 1% of a 20,000-member ZIP; then the time to the first training batch from a
ZIP of 300,000 small PNGs.

Part 1: a loopback S3 server (moto) sits behind a counting proxy, so every figure is counted
on the wire, the same way for both readers: HTTP requests, and body bytes fetched beyond the
bytes of the members asked for (the index included). Ratios are baseline / ours from the
same run. Data is generated in memory.

Part 2 (:mod:`_first_batch`): seconds from nothing open to the first shuffled batch of 64
decoded images out of ``DataLoader(num_workers=2)``: ours cold (no index cache) and with the
index cache, against s3fs + zipfile in one process (open + 64 random reads) and as a
Dataset under the same DataLoader; the same locally. ``--million`` adds 1,000,000 members
(about a minute more to generate and upload here).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _test_helpers import borrow
from timing import clocked

borrow("s3_server")
from helpers.s3_server import REGION, CountingProxy, free_port  # noqa: E402

from cdml_edge.archive import open_archive, pack  # noqa: E402
from cdml_edge.archive.s3 import S3IndexCache, open_s3_source  # noqa: E402

BUCKET = "bench"
KEY = "images/20k.zip"


def make_archive(n: int, seed: int) -> tuple[bytes, dict[str, bytes]]:
    rng = random.Random(seed)
    items = [
        (f"cam{i % 4}/{i:06d}.jpg", rng.randbytes(rng.randrange(1024, 6144))) for i in range(n)
    ]
    return pack(items, "zip", mtime=1_700_000_000), dict(items)


class Row:
    def __init__(
        self,
        label: str,
        index_req: int,
        index_bytes: int,
        req: int,
        fetched: int,
        needed: int,
        members: int,
        seconds: float,
    ) -> None:
        self.label = label
        self.index_req = index_req
        self.index_bytes = index_bytes
        self.req = req
        self.fetched = fetched
        self.needed = needed
        self.members = members
        self.seconds = seconds

    @property
    def per_member(self) -> float:
        return (self.req - self.index_req) / self.members

    @property
    def total_per_member(self) -> float:
        return self.req / self.members

    @property
    def overhead(self) -> int:
        return self.fetched - self.needed


def measure(
    label: str,
    proxy: CountingProxy,
    needed: int,
    members: int,
    open_fn: Callable[[], Any],
    read_fn: Callable[[Any], list[bytes]],
    expect: list[bytes],
) -> Row:
    proxy.reset()
    handle, t_open = clocked(open_fn)
    index_req, index_bytes = proxy.count(), proxy.body_bytes()
    got, t_read = clocked(lambda: read_fn(handle))
    seconds = t_open.wall + t_read.wall
    if got != expect:
        raise SystemExit(f"{label}: bytes differ from the local archive")
    return Row(
        label, index_req, index_bytes, proxy.count(), proxy.body_bytes(), needed, members, seconds
    )


def _threaded(parts: list[list[str]], opener: Callable[[int], Any]) -> list[bytes]:
    from concurrent.futures import ThreadPoolExecutor

    def work(k: int) -> list[bytes]:
        handle = opener(k)
        return [handle.read(n) for n in parts[k]]

    with ThreadPoolExecutor(len(parts)) as pool:
        return [b for chunk in pool.map(work, range(len(parts))) for b in chunk]


def expect_by(parts: list[list[str]], members: dict[str, bytes]) -> list[bytes]:
    return [members[n] for part in parts for n in part]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=20_000)
    ap.add_argument("--fraction", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch-members", type=int, nargs="*", default=[300_000])
    ap.add_argument("--million", action="store_true", help="also 1,000,000 members")
    ap.add_argument("--repeat", type=int, default=2, help="first-batch rows: best of N")
    ap.add_argument("--skip-reads", action="store_true", help="only the first-batch rows")
    args = ap.parse_args()

    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if not args.skip_reads:
        read_rows(args)
    first_batch_rows(args)


def first_batch_rows(args: argparse.Namespace) -> None:
    import _first_batch as fb

    sizes = list(args.batch_members) + ([1_000_000] if args.million else [])
    with fb.moto_server() as endpoint:
        for n in sizes:
            fb.report(n, fb.rows_for(n, endpoint, args.repeat))


def read_rows(args: argparse.Namespace) -> None:
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = CountingProxy(("127.0.0.1", port))
    try:
        blob, members = make_archive(args.members, args.seed)
        direct = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION)
        direct.create_bucket(Bucket=BUCKET)
        direct.put_object(Bucket=BUCKET, Key=KEY, Body=blob)
        rng = random.Random(args.seed + 1)
        names = rng.sample(sorted(members), max(1, int(args.members * args.fraction)))
        expect = [members[n] for n in names]
        needed = sum(len(v) for v in expect)  # stored members: compressed == raw
        url = f"s3://{BUCKET}/{KEY}"
        ep = proxy.url
        rows: list[Row] = []

        def ours_open(adaptive: bool = False) -> Any:
            src = open_s3_source(url, endpoint_url=ep, index_cache=False, adaptive_gap=adaptive)
            return open_archive(src)

        rows.append(
            measure(
                "ours: read() each",
                proxy,
                needed,
                len(names),
                ours_open,
                lambda a: [a.read(n) for n in names],
                expect,
            )
        )
        rows.append(
            measure(
                "ours: one read_many() (gap 256 KiB)",
                proxy,
                needed,
                len(names),
                ours_open,
                lambda a: a.read_many(names),
                expect,
            )
        )
        cache_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"cdml-bench-s3-{os.getpid()}"
        cache = S3IndexCache(cache_dir)
        open_archive(open_s3_source(url, endpoint_url=ep, index_cache=cache))
        rows.append(
            measure(
                "ours: read() each, index cache hit",
                proxy,
                needed,
                len(names),
                lambda: open_archive(open_s3_source(url, endpoint_url=ep, index_cache=cache)),
                lambda a: [a.read(n) for n in names],
                expect,
            )
        )

        def s3fs_open(block: int | None) -> Callable[[], Any]:
            def fn() -> Any:
                fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": ep, "region_name": REGION})
                kw = {"block_size": block} if block else {}
                return zipfile.ZipFile(fs.open(f"{BUCKET}/{KEY}", "rb", **kw))

            return fn

        default_block = int(getattr(s3fs.S3FileSystem, "default_block_size", 0) or 0)
        rows.append(
            measure(
                f"s3fs {s3fs.__version__} + zipfile (block {default_block >> 20} MiB)",
                proxy,
                needed,
                len(names),
                s3fs_open(None),
                lambda z: [z.read(n) for n in names],
                expect,
            )
        )
        rows.append(
            measure(
                f"s3fs {s3fs.__version__} + zipfile (block 64 KiB)",
                proxy,
                needed,
                len(names),
                s3fs_open(64 << 10),
                lambda z: [z.read(n) for n in names],
                expect,
            )
        )
        # four threads: ours shares one archive; zipfile objects are not thread-safe, so the
        # s3fs baseline opens one per thread and each reads the central directory
        parts = [names[k::4] for k in range(4)]
        rows.append(
            measure(
                "4 threads, ours: one shared archive",
                proxy,
                needed,
                len(names),
                ours_open,
                lambda a: _threaded(parts, lambda k: a),
                expect_by(parts, members),
            )
        )
        rows.append(
            measure(
                "4 threads, s3fs + zipfile (64 KiB) per thread",
                proxy,
                needed,
                len(names),
                lambda: [s3fs_open(64 << 10)() for _ in parts],
                lambda zs: _threaded(parts, lambda k: zs[k]),
                expect_by(parts, members),
            )
        )
        rows.append(
            measure(
                "ours: one read_many(), adaptive gap",
                proxy,
                needed,
                len(names),
                lambda: ours_open(adaptive=True),
                lambda a: a.read_many(names),
                expect,
            )
        )
        for f in cache_dir.glob("*"):
            f.unlink()
        cache_dir.rmdir()
    finally:
        proxy.stop()
        server.stop()

    print(
        f"archive: {args.members} stored members, {len(blob) / 1e6:.1f} MB; "
        f"read {len(names)} at random ({needed / 1e6:.2f} MB of member data)"
    )
    head = (
        f"{'reader':48} {'index req':>9} {'index MB':>8} {'req/member':>10} "
        f"{'MB beyond (reads)':>17} {'MB fetched':>10} {'seconds':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        beyond = r.fetched - r.index_bytes - r.needed
        print(
            f"{r.label:48} {r.index_req:9d} {r.index_bytes / 1e6:8.2f} {r.per_member:10.2f} "
            f"{beyond / 1e6:17.2f} {r.fetched / 1e6:10.2f} {r.seconds:7.1f}"
        )
    print(
        "req/member and MB beyond count the member reads after open; MB fetched is all "
        "body bytes.\nseconds are dominated by the loopback server, which copies the whole "
        "object for each ranged GET."
    )
    ours, threaded = rows[0], rows[5]
    for base, ref in ((rows[3], ours), (rows[4], ours), (rows[6], threaded)):
        print(
            f"{base.label} / {ref.label}: requests x{base.req / ref.req:.2f}, "
            f"bytes fetched beyond needed x{base.overhead / max(ref.overhead, 1):.1f}"
        )


if __name__ == "__main__":
    main()
