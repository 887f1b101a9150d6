"""open_archive("s3://...") against a loopback S3 server: request limits, bytes, index cache."""

from __future__ import annotations

import os
import pickle
import random
import zlib

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive import open_archive, pack
from cdml_edge.archive.s3 import (
    DEFAULT_TAIL_BYTES,
    ENDPOINT_ENV,
    INDEX_CACHE_ENV,
    S3AccessError,
    S3IndexCache,
    S3NotFoundError,
    S3Source,
    open_s3_source,
)
from cdml_edge.archive.spec import TAIL_BYTES
from cdml_edge.fsio import block_size

BUCKET = "archives"


def _members(n: int, seed: int, size: tuple[int, int] = (200, 3000)) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ext = (".jpg", ".json", ".csv", ".bin")[i % 4]
        payload = (
            rng.randbytes(rng.randrange(*size))
            if ext in (".jpg", ".bin")
            else (f'{{"i": {i}, "text": "{"x" * rng.randrange(10, 400)}"}}'.encode())
        )
        out.append((f"cam{i % 3}/{i:05d}{ext}", payload))
    return out


@pytest.fixture(scope="module")
def uploaded(s3_server: S3Server) -> dict[str, tuple[bytes, dict[str, bytes]]]:
    """key -> (local archive bytes, members); ZIP and tar.zst made by ``pack``."""
    out: dict[str, tuple[bytes, dict[str, bytes]]] = {}
    items = _members(600, seed=3)
    for key, fmt, frame in (("set/a.zip", "zip", 0), ("set/a.tar.zst", "tar.zst", 16 << 10)):
        kw = {"frame_bytes": frame} if frame else {}
        blob = pack(items, fmt, manifest={"source": "test"}, mtime=1_700_000_000, **kw)
        s3_server.put(BUCKET, key, blob)
        out[key] = (blob, dict(items))
    big = [(f"m/{i:06d}.jpg", i.to_bytes(4, "little")) for i in range(100_000)]
    blob = pack(big, "zip", mtime=0)
    s3_server.put(BUCKET, "set/big.zip", blob)
    out["set/big.zip"] = (blob, dict(big))
    return out


@pytest.fixture
def endpoint(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.setenv(INDEX_CACHE_ENV, "off")
    s3_server.proxy.reset()
    return s3_server.proxy.url


def test_tail_prefetch_serves_the_readers_tail_read() -> None:
    assert DEFAULT_TAIL_BYTES >= TAIL_BYTES  # the archive's tail read is served from memory


@pytest.mark.parametrize("key", ["set/a.zip", "set/a.tar.zst"])
def test_index_in_two_requests_and_bytes_equal_local(
    s3_server: S3Server, uploaded: dict, endpoint: str, key: str
) -> None:
    local_blob, members = uploaded[key]
    arc = open_archive(f"s3://{BUCKET}/{key}")
    index_gets = s3_server.proxy.count("GET")
    assert s3_server.proxy.count() == index_gets <= 2
    local = open_archive(local_blob)
    assert arc.names() == local.names()
    assert arc.format == local.format
    names = [n for n in arc.names() if n != "manifest.json"]
    assert set(names) == set(members)
    src = arc.source
    assert isinstance(src, S3Source)
    # each member read: one ranged GET (none for members inside the held tail / index, nor
    # for tar.zst members whose frame a neighbour's read left in the frame cache), bytes
    # identical to the local archive
    served = src.stats.served_from_memory
    cache = getattr(arc, "frame_cache", None)
    hits = cache.hits if cache else 0
    for n in random.Random(5).sample(names, 25):
        before = s3_server.proxy.count()
        assert arc.read(n) == local.read(n) == members[n]
        assert s3_server.proxy.count() - before <= 1
    member_gets = s3_server.proxy.count() - index_gets
    hits = (cache.hits if cache else 0) - hits
    assert member_gets + src.stats.served_from_memory - served + hits == 25
    assert member_gets + hits >= 20
    assert arc.read("manifest.json") == local.read("manifest.json")
    assert src.requests == s3_server.proxy.count()
    assert src.bytes_fetched == s3_server.proxy.body_bytes()


def test_index_of_100000_member_zip_in_two_requests(
    s3_server: S3Server, uploaded: dict, endpoint: str
) -> None:
    local_blob, members = uploaded["set/big.zip"]
    arc = open_archive(f"s3://{BUCKET}/set/big.zip")
    assert len(arc) == 100_000
    seen = s3_server.proxy.seen()
    assert len(seen) == 2 and all(s.method == "GET" for s in seen)
    # the two GETs are the tail and the rest of the central directory, nothing else
    assert sum(s.body_bytes for s in seen) < len(local_blob) * 0.7
    assert arc.read("m/099999.jpg") == members["m/099999.jpg"]
    assert arc.read("m/000000.jpg") == members["m/000000.jpg"]
    assert s3_server.proxy.count() == 4


@pytest.mark.parametrize("key", ["set/a.zip", "set/a.tar.zst"])
def test_read_many_coalesces_neighbours(
    s3_server: S3Server, uploaded: dict, endpoint: str, key: str
) -> None:
    local_blob, members = uploaded[key]
    src = open_s3_source(f"s3://{BUCKET}/{key}", gap=64 << 10)
    arc = open_archive(src)
    names = arc.names()[100:160]  # 60 neighbours: one GET for all of them
    s3_server.proxy.reset()
    got = arc.read_many(names[::-1])
    assert got == [members[n] for n in names[::-1]]
    assert s3_server.proxy.count("GET") == 1
    # spread-out members with a fixed gap of 0: one GET per isolated member
    tight = open_archive(open_s3_source(f"s3://{BUCKET}/{key}", gap=0, adaptive_gap=False))
    spread = tight.names()[0:600:100]
    s3_server.proxy.reset()
    assert tight.read_many(spread) == [members[n] for n in spread]
    assert s3_server.proxy.count("GET") == len(spread)


def test_index_cache_hit_costs_one_head(
    s3_server: S3Server, uploaded: dict, endpoint: str, tmp_path: os.PathLike[str]
) -> None:
    cache = S3IndexCache(tmp_path, max_bytes=64 << 20)
    url = f"s3://{BUCKET}/set/big.zip"
    first = open_archive(open_s3_source(url, index_cache=cache))
    assert s3_server.proxy.count("GET") == 2
    assert first.source.index_source == "network"  # type: ignore[attr-defined]
    first.read("m/000123.jpg")  # a member read is not cached as index
    s3_server.proxy.reset()
    again = open_archive(open_s3_source(url, index_cache=cache))
    seen = s3_server.proxy.seen()
    assert [s.method for s in seen] == ["HEAD"]  # no index GET at all
    assert again.source.index_source == "cache"  # type: ignore[attr-defined]
    assert len(again) == 100_000
    assert again.read("m/054321.jpg") == uploaded["set/big.zip"][1]["m/054321.jpg"]
    assert s3_server.proxy.count("GET") == 1
    assert cache.total_bytes() < 12 << 20  # tail + central directory, not the archive


def test_index_cache_from_environment_and_etag_change(
    s3_server: S3Server,
    endpoint: str,
    tmp_path: os.PathLike[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(INDEX_CACHE_ENV, os.fspath(tmp_path))
    url = f"s3://{BUCKET}/set/changing.zip"
    v1 = _members(50, seed=10)
    s3_server.put(BUCKET, "set/changing.zip", pack(v1, "zip"))
    assert open_archive(url).read(v1[7][0]) == v1[7][1]
    s3_server.proxy.reset()
    assert open_archive(url).source.index_source == "cache"  # type: ignore[attr-defined]
    v2 = _members(80, seed=11)
    s3_server.put(BUCKET, "set/changing.zip", pack(v2, "zip"))
    s3_server.proxy.reset()
    arc = open_archive(url)  # HEAD sees a new ETag: the stale entry is not used
    assert len(arc) == 80 and arc.read(v2[70][0]) == v2[70][1]
    assert arc.source.index_source == "network"  # type: ignore[attr-defined]
    assert s3_server.proxy.seen()[0].method == "HEAD"


def test_an_index_whose_blocks_exceed_the_cache_bound_is_not_kept(
    tmp_path: os.PathLike[str],
) -> None:
    """Its length fits the bound, its whole blocks do not: it would hold the folder above it."""
    block = block_size(tmp_path)
    cache = S3IndexCache(os.path.join(tmp_path, "idx"), max_bytes=2 * block - 1)
    assert not cache.put("aws|b|k", '"e"', 1, [(0, b"i" * (block + 100))])
    assert cache.total_bytes() <= cache.max_bytes and cache.get("aws|b|k") is None


def test_index_cache_is_byte_bounded(tmp_path: os.PathLike[str]) -> None:
    cache = S3IndexCache(tmp_path, max_bytes=14_000)  # three files of a 4 KiB block fit
    for i in range(5):
        assert cache.put(f"aws|b|k{i}", f'"e{i}"', 100, [(0, bytes([i]) * 3000)])
        os.utime(cache.path_for(f"aws|b|k{i}"), (1000 + i, 1000 + i))
    assert cache.total_bytes() <= 14_000
    assert cache.get("aws|b|k0") is None and cache.get("aws|b|k4") is not None
    cache.touch("aws|b|k2")  # now the most recent: survives the next eviction
    assert cache.put("aws|b|k9", '"e9"', 100, [(0, b"z" * 3000)])
    assert cache.get("aws|b|k2") is not None and cache.get("aws|b|k3") is None
    assert not cache.put("aws|b|huge", '"e"', 1, [(0, b"h" * 20_000)])  # over the bound alone
    # a corrupt entry is a miss and is removed
    path = cache.path_for("aws|b|k9")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert cache.get("aws|b|k9") is None and not path.exists()
    entry = cache.get("aws|b|k4")
    assert entry is not None and entry.etag == '"e4"' and entry.chunks == ((0, b"\x04" * 3000),)


def test_typed_errors_through_open_archive(s3_server: S3Server, endpoint: str) -> None:
    with pytest.raises(S3NotFoundError) as err:
        open_archive(f"s3://{BUCKET}/set/missing.zip")
    assert err.value.bucket == BUCKET and err.value.key == "set/missing.zip"
    s3_server.set_auth(True)  # the dummy credentials are unknown to the server's IAM
    try:
        with pytest.raises(S3AccessError) as denied:
            open_archive(f"s3://{BUCKET}/set/a.zip")
    finally:
        s3_server.set_auth(False)
    assert denied.value.status == 403 and denied.value.key == "set/a.zip"


def test_pickled_archive_reopens_without_requests(
    s3_server: S3Server, uploaded: dict, endpoint: str
) -> None:
    arc = open_archive(f"s3://{BUCKET}/set/big.zip")
    s3_server.proxy.reset()
    clone = pickle.loads(pickle.dumps(arc))
    assert len(clone) == 100_000
    assert s3_server.proxy.count() == 0  # the tail and central directory travel with it
    data = clone.read("m/000042.jpg")
    assert (
        data == (42).to_bytes(4, "little")
        and zlib.crc32(data) == clone.info("m/000042.jpg").checksum
    )
    assert s3_server.proxy.count() == 1


def test_partial_cache_entry_is_completed(
    s3_server: S3Server, uploaded: dict, endpoint: str, tmp_path: os.PathLike[str]
) -> None:
    """An entry holding only the tail (process ended before the index read) is completed."""
    cache = S3IndexCache(tmp_path)
    url = f"s3://{BUCKET}/set/big.zip"
    open_s3_source(url, index_cache=cache)  # tail stored at open, no reader ran
    s3_server.proxy.reset()
    open_archive(open_s3_source(url, index_cache=cache))
    assert [s.method for s in s3_server.proxy.seen()] == ["HEAD", "GET"]  # the missing index
    s3_server.proxy.reset()
    arc = open_archive(open_s3_source(url, index_cache=cache))
    assert [s.method for s in s3_server.proxy.seen()] == ["HEAD"]
    assert len(arc) == 100_000


def test_cache_hit_starts_with_the_measured_pace(
    s3_server: S3Server, uploaded: dict, endpoint: str, tmp_path: os.PathLike[str]
) -> None:
    """The latency and bandwidth measured while fetching the index are kept with it.

    So a re-open (one HEAD, no GET) coalesces its first batch as the first open would.
    """
    cache = S3IndexCache(tmp_path)
    url = f"s3://{BUCKET}/set/big.zip"
    first = open_s3_source(url, index_cache=cache)
    open_archive(first)
    lat, bw = first.pace.measured()
    assert lat is not None and bw is not None  # the tail GET and the central directory GET
    again = open_s3_source(url, index_cache=cache)
    assert again.index_source == "cache" and again.pace.measured()[1] == bw
