"""A batch of ranged reads holds at most the bytes it needs plus a bound of bridged gaps.

``pread_many`` joins ranges closer than the gap (with ``adaptive_gap`` the gap one
request's latency is worth, up to ``max_request``) into one ``GET``, and holds every
group's bytes until the batch is split. Members spread over a large object each bridged up
to the gap: 64 members of 4 KB at random in a 200 MB object fetched 150 MB in 11 GETs, all
held at once, per DataLoader worker. The gap bytes one call bridges are now at most four
``max_request``; past that, ranges are fetched on their own.
"""

from __future__ import annotations

import random

from helpers.s3_server import S3Server

from cdml_edge.archive.s3 import RetryPolicy, open_s3_source
from cdml_edge.archive.s3.ranges import coalesce

MIB = 1 << 20
BUCKET = "batch-bucket"


def test_the_gap_bytes_one_batch_bridges_are_bounded(s3_server: S3Server) -> None:
    data = random.Random(3).randbytes(24 * MIB)
    s3_server.put(BUCKET, "big.bin", data)
    src = open_s3_source(
        f"s3://{BUCKET}/big.bin",
        endpoint_url=s3_server.proxy.url,
        retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05),
        index_cache=False,
        adaptive_gap=False,
        gap=2 * MIB,  # as a learned gap on a slow, far store would be
        max_request=2 * MIB,
    )
    try:
        rng = random.Random(5)
        ranges = [(rng.randrange(0, len(data) - 4000), 4000) for _ in range(64)]
        before = src.bytes_fetched
        got = src.pread_many(ranges)
        assert got == [data[o : o + n] for o, n in ranges]
        fetched = src.bytes_fetched - before
        needed = sum(n for _, n in ranges)
        assert fetched <= needed + 4 * 2 * MIB + 2 * MIB, f"{fetched:,} bytes for {needed:,}"
    finally:
        src.close()


def test_coalesce_stops_bridging_past_its_budget() -> None:
    ranges = [(k * 100, k * 100 + 10, k) for k in range(10)]  # 90-byte gaps
    assert len(coalesce(ranges, gap=100, max_request=10_000)) == 1
    groups = coalesce(ranges, gap=100, max_request=10_000, max_waste=270)
    bridged = sum(
        b[0] - a[1] for _, _, members in groups for a, b in zip(members, members[1:], strict=False)
    )
    assert bridged <= 270 and len(groups) == 7  # 3 gaps bridged, then each range alone
