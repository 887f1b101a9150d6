"""S3Source against a real S3 HTTP server on loopback: ranges, coalescing, retries, errors."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.s3 import (
    ENDPOINT_ENV,
    INDEX_CACHE_BYTES_ENV,
    INDEX_CACHE_ENV,
    REGION_ENV,
    RetryPolicy,
    S3AccessError,
    S3IndexCache,
    S3NotFoundError,
    S3ObjectChangedError,
    S3Source,
    S3TransientError,
    configure_s3,
    open_s3_source,
    parse_s3_url,
)
from cdml_edge.archive.s3.pace import ASSUMED_BANDWIDTH, RequestPace
from cdml_edge.archive.s3.ranges import coalesce

BUCKET = "src-bucket"
# Generous timeouts: the machine running the tests may be busy; retries must come from faults.
FAST = RetryPolicy(
    attempts=4,
    base_delay=0.01,
    max_delay=0.05,
    botocore_attempts=1,
    connect_timeout=20,
    read_timeout=20,
)


@pytest.fixture(scope="module")
def blob(s3_server: S3Server) -> bytes:
    data = random.Random(7).randbytes(3_000_000)
    s3_server.put(BUCKET, "data/blob.bin", data)
    return data


def _open(server: S3Server, key: str = "data/blob.bin", **kw: object) -> S3Source:
    server.proxy.reset()
    kw.setdefault("retry", FAST)
    kw.setdefault("index_cache", False)  # request counts here are those of a first open
    kw.setdefault("adaptive_gap", False)  # and coalescing follows ``gap`` alone
    return open_s3_source(f"s3://{BUCKET}/{key}", endpoint_url=server.proxy.url, **kw)  # type: ignore[arg-type]


def test_parse_url() -> None:
    assert parse_s3_url("s3://b/a/b/c.zip") == ("b", "a/b/c.zip")
    for bad in ("s3://bucket", "s3:///key", "http://b/k", "b/k"):
        with pytest.raises(ValueError):
            parse_s3_url(bad)


def test_open_is_one_tail_get(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=4096)
    assert src.size() == len(blob)
    assert s3_server.proxy.count() == 1
    (req,) = s3_server.proxy.seen()
    assert (req.method, req.range) == ("GET", "bytes=-4096")
    assert src.requests == 1 and src.bytes_fetched == 4096
    # the tail is served from memory
    assert src.pread(len(blob) - 100, 100) == blob[-100:]
    assert s3_server.proxy.count() == 1


def test_pread_is_one_ranged_get_with_exact_bytes(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=4096)
    rng = random.Random(1)
    for _ in range(20):
        off = rng.randrange(0, len(blob) - 10_000)
        n = rng.randrange(1, 10_000)
        assert src.pread(off, n) == blob[off : off + n]
    gets = s3_server.proxy.seen("GET")
    assert len(gets) == 21  # tail + one per read
    assert src.requests == 21
    assert s3_server.proxy.body_bytes("GET") == src.bytes_fetched
    # reads past the end are short, never a request
    assert src.pread(len(blob) - 5, 100) == blob[-5:]
    assert src.pread(len(blob) + 10, 5) == b""
    assert src.pread(0, 0) == b""
    assert s3_server.proxy.count() == 21
    with pytest.raises(ValueError):
        src.pread(-1, 3)


def test_read_overlapping_tail_fetches_only_missing_part(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=4096)
    start = len(blob) - 10_000
    assert src.pread(start, 10_000) == blob[start:]
    last = s3_server.proxy.seen("GET")[-1]
    assert last.range == f"bytes={start}-{len(blob) - 4096 - 1}"
    assert last.body_bytes == 10_000 - 4096


def test_pread_many_coalesces_within_gap(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=1024, gap=1000)
    # three clusters: [0..3000) close together, then 100k away, then 1M away
    ranges = [(0, 500), (1200, 300), (2000, 1000), (100_000, 10), (100_500, 20), (1_000_000, 7)]
    shuffled = ranges[::-1]
    out = src.pread_many(shuffled)
    assert out == [blob[o : o + n] for o, n in shuffled]
    gets = s3_server.proxy.seen("GET")[1:]
    assert sorted(g.range or "" for g in gets) == sorted(
        ["bytes=0-2999", "bytes=100000-100519", "bytes=1000000-1000006"]
    )
    assert src.requests == 1 + 3


def test_pread_many_respects_max_request(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=1024, gap=1 << 20, max_request=100_000)
    ranges = [(i * 40_000, 1000) for i in range(10)]  # 400 kB span, gaps of 39 kB
    assert src.pread_many(ranges) == [blob[o : o + n] for o, n in ranges]
    gets = s3_server.proxy.seen("GET")[1:]
    assert len(gets) == 4  # 3 ranges per 100 kB group: 0-2, 3-5, 6-8, 9
    assert all(g.body_bytes <= 100_000 for g in gets)


def test_pread_many_overlapping_and_empty(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=1024, gap=0)
    ranges = [(10, 100), (50, 100), (500, 0), (len(blob) + 5, 10), (140, 10)]
    assert src.pread_many(ranges) == [blob[o : o + n] for o, n in ranges]
    assert s3_server.proxy.count("GET") == 2  # tail + one GET for 10..160


def test_coalesce_groups() -> None:
    groups = coalesce(
        [(50, 60, 1), (0, 10, 0), (15, 20, 2), (200, 300, 3)], gap=5, max_request=1000
    )
    assert [(s, e, [t for *_, t in m]) for s, e, m in groups] == [
        (0, 20, [0, 2]),
        (50, 60, [1]),
        (200, 300, [3]),
    ]
    big = coalesce([(0, 5000, 0), (5000, 5001, 1)], gap=10, max_request=100)
    assert len(big) == 2


def test_missing_key_and_bucket_are_typed(s3_server: S3Server, blob: bytes) -> None:
    with pytest.raises(S3NotFoundError) as err:
        _open(s3_server, key="data/nope.zip")
    assert err.value.bucket == BUCKET and err.value.key == "data/nope.zip"
    assert "s3://src-bucket/data/nope.zip" in str(err.value)
    assert isinstance(err.value, ArchiveError) and err.value.status == 404
    with pytest.raises(S3NotFoundError) as err2:
        open_s3_source("s3://no-such-bucket/k.zip", endpoint_url=s3_server.proxy.url, retry=FAST)
    assert "no-such-bucket" in str(err2.value)
    # typed errors survive pickling (DataLoader workers send them to the parent)
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is S3NotFoundError and again.key == "data/nope.zip"


def test_access_denied_is_typed(s3_server: S3Server, blob: bytes) -> None:
    iam = __import__("boto3").client(
        "iam",
        endpoint_url=s3_server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    iam.create_user(UserName="reader")
    iam.put_user_policy(
        UserName="reader",
        PolicyName="other-bucket-only",
        PolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*",'
            '"Resource":["arn:aws:s3:::other-bucket","arn:aws:s3:::other-bucket/*"]}]}'
        ),
    )
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    saved = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = key["AccessKeyId"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = key["SecretAccessKey"]
    s3_server.set_auth(True)
    try:
        with pytest.raises(S3AccessError) as err:
            _open(s3_server, key="data/blob.bin", region="eu-west-3")
    finally:
        s3_server.set_auth(False)
        os.environ.update(saved)
    assert err.value.status == 403
    assert err.value.bucket == BUCKET and err.value.key == "data/blob.bin"
    assert "access denied" in str(err.value) and "s3://src-bucket/data/blob.bin" in str(err.value)


def test_retries_5xx_and_throttling(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=1024)
    s3_server.proxy.fail_next(1, status=503, code="SlowDown")
    s3_server.proxy.fail_next(1, status=500, code="InternalError")
    s3_server.proxy.fail_next(1, status=429, code="TooManyRequests")
    assert src.pread(1000, 5000) == blob[1000:6000]
    statuses = [g.status for g in s3_server.proxy.seen("GET")[1:]]
    assert statuses == [503, 500, 429, 206]
    assert src.stats.retries == 3 and src.requests == 5


def test_botocore_retries_are_counted(s3_server: S3Server, blob: bytes) -> None:
    policy = RetryPolicy(attempts=1, base_delay=0.01, botocore_attempts=3)
    src = _open(s3_server, tail_bytes=1024, retry=policy)
    s3_server.proxy.fail_next(2, status=503)
    assert src.pread(0, 10) == blob[:10]
    assert src.requests == s3_server.proxy.count() == 4
    assert src.stats.retries == 2


def test_retries_truncated_body_and_timeouts(s3_server: S3Server, blob: bytes) -> None:
    policy = RetryPolicy(attempts=4, base_delay=0.01, botocore_attempts=1, read_timeout=1.0)
    src = _open(s3_server, tail_bytes=1024, retry=policy)
    s3_server.proxy.truncate_next(1)
    assert src.pread(0, 200_000) == blob[:200_000]
    s3_server.proxy.delay_next(1, 3.0)
    assert src.pread(500_000, 1000) == blob[500_000:501_000]
    seen = s3_server.proxy.seen("GET")[1:]
    assert [s.body_bytes for s in seen[:2]] == [100_000, 200_000]  # truncated, then whole
    assert 0 in [s.status for s in seen]  # the delayed one timed out on the client
    assert src.stats.retries >= 2  # more only if the busy server was slower than 1 s
    assert src.requests == s3_server.proxy.count() == 1 + 2 + src.stats.retries


def test_gives_up_with_typed_error(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=1024)
    s3_server.proxy.fail_next(FAST.attempts, status=503)
    with pytest.raises(S3TransientError) as err:
        src.pread(0, 10)
    assert err.value.status == 503 and err.value.key == "data/blob.bin"
    assert s3_server.proxy.count("GET") == 1 + FAST.attempts


def test_object_replaced_while_open(s3_server: S3Server) -> None:
    s3_server.put(BUCKET, "data/changing.bin", b"a" * 100_000)
    src = _open(s3_server, key="data/changing.bin", tail_bytes=1024)
    assert src.pread(0, 10) == b"a" * 10
    s3_server.put(BUCKET, "data/changing.bin", b"b" * 100_000)
    with pytest.raises(S3ObjectChangedError):
        src.pread(0, 10)


def test_small_and_empty_objects(s3_server: S3Server) -> None:
    s3_server.put(BUCKET, "tiny.bin", b"hello")
    src = _open(s3_server, key="tiny.bin")
    assert src.size() == 5 and src.pread(0, 100) == b"hello"
    assert s3_server.proxy.count() == 1
    s3_server.put(BUCKET, "empty.bin", b"")
    empty = _open(s3_server, key="empty.bin")
    assert empty.size() == 0 and empty.pread(0, 10) == b""
    assert empty.pread_many([(0, 3)]) == [b""]


def test_endpoint_from_environment(
    s3_server: S3Server, blob: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    s3_server.proxy.reset()
    src = open_s3_source(f"s3://{BUCKET}/data/blob.bin", retry=FAST)
    assert src.endpoint_url == s3_server.proxy.url
    assert src.pread(5, 5) == blob[5:10]
    assert s3_server.proxy.count() == 2


def test_pickle_keeps_tail_and_drops_client(s3_server: S3Server, blob: bytes) -> None:
    src = _open(s3_server, tail_bytes=2048)
    src.pread(0, 10)
    clone = pickle.loads(pickle.dumps(src))
    before = s3_server.proxy.count()
    assert clone.size() == len(blob) and clone.etag == src.etag
    assert clone.pread(len(blob) - 2048, 2048) == blob[-2048:]  # from the pickled tail
    assert s3_server.proxy.count() == before
    assert clone.requests == 0
    assert clone.pread(100, 10) == blob[100:110]
    assert s3_server.proxy.count() == before + 1


def test_fork_gets_its_own_client(s3_server: S3Server, blob: bytes) -> None:
    import multiprocessing as mp

    src = _open(s3_server, tail_bytes=1024)
    src.pread(0, 10)  # the parent's client exists now
    ctx = mp.get_context("fork")
    q: mp.Queue[object] = ctx.Queue()

    src.pread_many([(0, 10), (2_000_000, 10)])  # the parent's thread pool exists too

    def child() -> None:
        one = src.pread(1000, 10) == blob[1000:1010]
        many = src.pread_many([(5, 5), (1_500_000, 5)]) == [blob[5:10], blob[1_500_000:1_500_005]]
        q.put((os.getpid(), one and many, src.requests))

    procs = [ctx.Process(target=child) for _ in range(3)]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert all(ok for _, ok, _ in results)
    assert len({pid for pid, _, _ in results}) == 3
    assert src.pread(2000, 10) == blob[2000:2010]


def test_threads_share_a_source(s3_server: S3Server, blob: bytes) -> None:
    from concurrent.futures import ThreadPoolExecutor

    src = _open(s3_server, tail_bytes=1024)
    offsets = list(range(0, 2_000_000, 50_000))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda o: src.pread(o, 3000), offsets))
    assert got == [blob[o : o + 3000] for o in offsets]
    assert src.requests == s3_server.proxy.count() == 1 + len(offsets)


def test_configure_sets_process_defaults(
    s3_server: S3Server, blob: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in (ENDPOINT_ENV, REGION_ENV, INDEX_CACHE_ENV, INDEX_CACHE_BYTES_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
    configure_s3(
        endpoint_url=s3_server.proxy.url,
        region="eu-central-1",
        index_cache=tmp_path / "idx",
        index_cache_bytes=1 << 20,
    )
    s3_server.proxy.reset()
    src = open_s3_source(f"s3://{BUCKET}/data/blob.bin", retry=FAST)
    assert src.endpoint_url == s3_server.proxy.url and src.region == "eu-central-1"
    assert src.index_cache is not None and src.index_cache.max_bytes == 1 << 20
    assert src.index_cache.total_bytes() > 0  # the tail was stored at open
    again = open_s3_source(f"s3://{BUCKET}/data/blob.bin", retry=FAST)
    assert again.index_source == "cache"
    assert [s.method for s in s3_server.proxy.seen()] == ["GET", "HEAD"]
    configure_s3(index_cache=False)  # off: every open reads the tail again
    s3_server.proxy.reset()
    off = open_s3_source(f"s3://{BUCKET}/data/blob.bin", retry=FAST)
    assert off.index_cache is None and off.index_source == "network"
    assert [s.method for s in s3_server.proxy.seen()] == ["GET"]
    configure_s3(index_cache=True)  # on again, in the user's cache folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    on = open_s3_source(f"s3://{BUCKET}/data/blob.bin", retry=FAST)
    assert on.index_cache is not None
    assert on.index_cache.root == tmp_path / "xdg" / "cdml-edge" / "s3-index"


def test_long_read_is_parallel_ranged_gets(s3_server: S3Server, blob: bytes) -> None:
    """A read over twice ``part_bytes`` (a central directory) is cut into parts fetched at once.

    A shorter one stays one GET.
    """
    src = _open(s3_server, tail_bytes=4096, part_bytes=256 << 10)
    s3_server.proxy.reset()
    assert src.pread(100, 1_000_000) == blob[100:1_000_100]
    ranges = sorted(
        tuple(int(x) for x in s.range.removeprefix("bytes=").split("-"))  # type: ignore[union-attr]
        for s in s3_server.proxy.seen("GET")
    )
    starts = [100 + k * (256 << 10) for k in range(4)]  # the last part is 213,568 bytes
    assert ranges == [(a, b - 1) for a, b in zip(starts, [*starts[1:], 1_000_100], strict=True)]
    s3_server.proxy.reset()
    assert src.pread(2_000_000, 512 << 10) == blob[2_000_000 : 2_000_000 + (512 << 10)]
    assert s3_server.proxy.count("GET") == 1


def test_unwritable_index_cache_never_fails_a_read(
    s3_server: S3Server, blob: bytes, tmp_path: Path
) -> None:
    (tmp_path / "file").write_bytes(b"")
    cache = S3IndexCache(tmp_path / "file" / "cache")  # a folder below a file: cannot exist
    src = _open(s3_server, index_cache=cache)
    assert src.pread(len(blob) - 10, 10) == blob[-10:]
    assert cache.write_errors >= 1 and cache.total_bytes() == 0


def test_request_pace_gap_is_the_bandwidth_delay_product() -> None:
    pace = RequestPace()
    assert pace.gap(1000, 1 << 30) == 1000  # nothing measured: the configured gap
    pace.observe(0, 0.02)  # a HEAD: 20 ms before any byte
    assert pace.gap(1000, 1 << 30) == int(0.02 * ASSUMED_BANDWIDTH)
    pace.observe(4 << 20, 0.02 + (4 << 20) / 50e6)  # 4 MiB at 50 MB/s after the latency
    assert pace.gap(1000, 1 << 30) == pytest.approx(0.02 * 50e6, rel=1e-6)
    assert pace.gap(1000, 500_000) == 500_000  # never past max_request
    slow = pickle.loads(pickle.dumps(pace))  # workers inherit what the parent measured
    assert slow.gap(1000, 1 << 30) == pace.gap(1000, 1 << 30)


def test_adaptive_gap_coalesces_where_requests_cost_more_than_bytes(
    s3_server: S3Server, blob: bytes
) -> None:
    """Ranges 100 KiB apart: separate GETs under a fixed 64 KiB gap.

    One GET once the source has measured that a request costs more than 100 KiB of transfer.
    """
    ranges = [(k * 200_000, 1000) for k in range(8)]
    fixed = _open(s3_server, gap=64 << 10, tail_bytes=4096)
    s3_server.proxy.reset()
    assert fixed.pread_many(ranges) == [blob[o : o + n] for o, n in ranges]
    assert s3_server.proxy.count("GET") == 8
    learnt = _open(s3_server, gap=64 << 10, tail_bytes=4096, adaptive_gap=True)
    learnt.pace.observe(0, 0.05)  # as a store 50 ms away would answer
    learnt.pace.observe(8 << 20, 0.05 + (8 << 20) / 100e6)  # at 100 MB/s: gap 5 MB
    s3_server.proxy.reset()
    assert learnt.pread_many(ranges) == [blob[o : o + n] for o, n in ranges]
    assert s3_server.proxy.count("GET") == 1
