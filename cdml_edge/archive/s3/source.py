"""``s3://`` byte source: archives read by HTTP byte ranges, never downloaded whole.

:func:`open_s3_source` returns an :class:`S3Source` (a
:class:`~cdml_edge.archive.source.ByteSource`). Opening costs one suffix-range ``GET`` of the
object's tail (which also gives its size and ETag); the reader's tail read is served from it
and its member index costs one more ranged ``GET`` at most (a long one fetched in parallel
``part_bytes`` parts), or none with an
:class:`~cdml_edge.archive.s3.index_cache.S3IndexCache`. Each ``pread`` is one ranged
``GET``; ``pread_many`` merges ranges at most ``gap`` bytes apart into one ``GET`` (with
``adaptive_gap``, the gap :mod:`.pace` learns). Every ``GET`` after open carries
``If-Match: <ETag>``: an object replaced while open raises :class:`S3ObjectChangedError`
instead of mixing bytes of two versions. The source pickles without its client
(:mod:`.client`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from cdml_edge.archive.s3.client import (
    RetryPolicy,
    S3Stats,
    bind_stats,
    sent_count,
    shared_client,
    shared_pool,
)
from cdml_edge.archive.s3.errors import (
    S3Error,
    S3TransientError,
    is_transient,
    map_client_error,
    setup_error,
)
from cdml_edge.archive.s3.index_cache import DEFAULT_INDEX_CACHE_BYTES, S3IndexCache
from cdml_edge.archive.s3.pace import RequestPace
from cdml_edge.archive.s3.ranges import Extents, coalesce, content_range
from cdml_edge.archive.s3.settings import (
    ENDPOINT_ENV,
    INDEX_CACHE_BYTES_ENV,
    REGION_ENV,
    index_cache_dir,
)
from cdml_edge.units import size_from_env

# Ranges closer than this are fetched in one GET (the gap bytes are read and dropped).
DEFAULT_GAP = 256 << 10
# One coalesced GET never spans more than this.
DEFAULT_MAX_REQUEST = 16 << 20
# A single read longer than twice this (a central directory, a member index) is fetched as
# parts of this size by parallel ranged GETs.
DEFAULT_PART_BYTES = 4 << 20
# Bytes read from the end of the object at open: a ZIP end record with the longest comment
# (22 + 65535), the ZIP64 locator and record, and a tar.zst seek table of small archives.
DEFAULT_TAIL_BYTES = 128 << 10

_URL = re.compile(r"^s3://(?P<bucket>[^/]+)/(?P<key>.+)$")


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/path/to/key`` -> ``(bucket, key)``.

    Raises ``ValueError`` naming the URL when it has no bucket or key, or is no UTF-8 text
    (a name decoded with ``surrogateescape``): S3 names are UTF-8.
    """
    m = _URL.match(url)
    if not m:
        raise ValueError(f"not an s3 URL (want s3://bucket/key): {url!r}")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"not an s3 URL (bucket and key must be UTF-8 text): {url!r}") from None
    return m.group("bucket"), m.group("key")


class S3Source:
    """A read-only S3 object as a :class:`ByteSource` (thread-safe, fork-safe, picklable).

    ``stats`` (``requests``, ``bytes_fetched``, ...) counts this process's HTTP requests.
    """

    def __init__(
        self,
        bucket: str,
        key: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        index_cache: S3IndexCache | None = None,
        gap: int = DEFAULT_GAP,
        max_request: int = DEFAULT_MAX_REQUEST,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        retry: RetryPolicy | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        adaptive_gap: bool = True,
    ) -> None:
        if gap < 0 or max_request <= 0 or tail_bytes <= 0 or part_bytes <= 0:
            raise ValueError("gap must be >= 0, max_request, tail_bytes and part_bytes > 0")
        self.bucket = bucket
        self.key = key
        self.endpoint_url = endpoint_url or None
        self.region = region
        self.index_cache = index_cache
        self.gap = int(gap)
        self.max_request = int(max_request)
        self.tail_bytes = int(tail_bytes)
        self.part_bytes = int(part_bytes)
        self.adaptive_gap = bool(adaptive_gap)
        #: latency and bandwidth measured on this source's GETs (see :mod:`.pace`)
        self.pace = RequestPace()
        self.retry = retry or RetryPolicy()
        self.stats = S3Stats()
        self.index_source = "none"  # how the index was obtained: "network" or "cache"
        self._size: int | None = None
        self._etag: str | None = None
        self._known = Extents()
        self._known_lock = threading.Lock()
        self._recording = False
        self._open_lock = threading.Lock()
        _live_sources.add(self)

    def _fresh_locks(self) -> None:
        """New locks in a forked child: a thread of the parent may have held one at the fork."""
        self._known_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self.stats.lock = threading.Lock()
        self.pace.lock = threading.Lock()

    # -- ByteSource ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{self.key}"

    @property
    def etag(self) -> str:
        """The object's ETag (opens the source on first use)."""
        self.open()
        assert self._etag is not None
        return self._etag

    @property
    def requests(self) -> int:
        """HTTP requests this source made in this process, retries included."""
        return self.stats.requests

    @property
    def bytes_fetched(self) -> int:
        """Body bytes this source fetched in this process."""
        return self.stats.bytes_fetched

    def __repr__(self) -> str:
        return f"<S3Source {self.name} size={self._size} etag={self._etag}>"

    def size(self) -> int:
        """The object's size in bytes (opens the source on first use)."""
        self.open()
        assert self._size is not None
        return self._size

    def fileno(self) -> int | None:
        """Always ``None``: an object has no descriptor."""
        return None

    def close(self) -> None:
        """Nothing to release: the client is shared per process; the source stays usable."""

    def pread(self, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset``: from memory if held, else ranged GETs.

        During the index phase the fetched bytes are kept (and written to the index cache).
        """
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        size = self.size()
        end = min(size, offset + length)
        if offset >= end:
            return b""
        with self._known_lock:
            data = self._known.get(offset, end)
            a, b = self._known.missing_span(offset, end) if data is None else (end, end)
        if data is not None:
            self._count(served=1)
            return data
        fetched = self._get_parts(a, b)
        with self._known_lock:
            head = self._known.get(offset, a) if a > offset else b""
            tail = self._known.get(b, end) if end > b else b""
            # Index reads extend the bytes held from the tail backwards (central directory,
            # seek table, member index); the first read that does not ends the index phase.
            record = self._recording and self._known.covering(b) is not None
            if record:
                self._known.add(a, fetched)
        if head is None or tail is None:  # pragma: no cover - extents only grow
            raise S3Error("index bytes vanished", bucket=self.bucket, key=self.key)
        if record:
            self._store_index()
        elif self._recording:
            self.index_loaded()
        return head + fetched + tail

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read ranges; those within ``gap`` of each other share one ranged ``GET``."""
        self._recording = False
        size = self.size()
        out: list[bytes] = [b""] * len(ranges)
        todo: list[tuple[int, int, int]] = []
        served = 0
        with self._known_lock:
            for i, (off, n) in enumerate(ranges):
                if off < 0 or n < 0:
                    raise ValueError("negative offset or length")
                end = min(size, off + n)
                if off >= end:
                    continue
                data = self._known.get(off, end)
                if data is not None:
                    out[i] = data
                    served += 1
                else:
                    todo.append((off, end, i))
        if served:
            self._count(served=served)
        # the gap bytes one call holds beside what it needs: at most four requests' worth
        groups = coalesce(todo, self.coalesce_gap(), self.max_request, 4 * self.max_request)
        if len(groups) == 1:
            results = [self._get_range(groups[0][0], groups[0][1])]
        else:
            pool = shared_pool()
            results = list(pool.map(lambda g: self._get_range(g[0], g[1]), groups))
        for (start, _end, members), blob in zip(groups, results, strict=True):
            for off, end, i in members:
                out[i] = blob[off - start : end - start]
        return out

    # -- open and index ------------------------------------------------------------------
    @property
    def prefers_tail(self) -> bool:
        """Format detection should look at the tail (held in memory) before the head."""
        return True

    def open(self) -> None:
        """Learn size and ETag, reading the tail (or the cached index). Idempotent."""
        if self._size is not None:
            return
        with self._open_lock:
            if self._size is not None:
                return
            cache = self.index_cache
            ident = S3IndexCache.ident(self.endpoint_url, self.bucket, self.key)
            entry = cache.get(ident) if cache is not None else None
            if cache is not None and entry is not None:
                size, etag = self._head()
                if etag == entry.etag and size == entry.size:
                    with self._known_lock:
                        self._known = Extents(entry.chunks)
                    self.pace.seed(*entry.pace)
                    cache.touch(ident)
                    self._etag, self.index_source = etag, "cache"
                    self._recording = True  # an index read the entry lacks is added to it
                    self._size = size
                    return
                cache.discard(ident)
                self._etag = etag
                self._open_tail(size)
            else:
                self._open_tail(None)
            self.index_source = "network"
            self._recording = True
            self._store_index()

    def _open_tail(self, size: int | None) -> None:
        if size is None:
            rng = f"bytes=-{self.tail_bytes}"
        elif size == 0:
            self._size = 0
            return
        else:
            rng = f"bytes={max(0, size - self.tail_bytes)}-{size - 1}"
        limit = self.tail_bytes if size is None else min(size, self.tail_bytes)
        try:
            resp, body = self._request("GET", limit=limit, Range=rng)
        except S3Error as exc:
            if exc.status != 416:  # an empty object has no satisfiable range
                raise
            size, self._etag = self._head()
            self._size = size
            return
        total, start = content_range(resp, len(body))
        self._etag = str(resp.get("ETag") or self._etag or "")
        with self._known_lock:
            self._known.add(start, body)
        self._size = total

    def index_loaded(self) -> None:
        """End the index phase: later reads are members and are not kept in memory.

        Readers may call it after parsing their index; otherwise the first ``pread_many``
        or the first fetched ``pread`` that does not extend the held bytes ends it.
        """
        self._recording = False

    def _store_index(self) -> None:
        """Write the bytes held so far (tail, index) to the index cache, if there is one."""
        cache = self.index_cache
        if cache is None or not self._etag or self._size is None:
            return
        with self._known_lock:
            chunks = self._known.chunks()
        ident = S3IndexCache.ident(self.endpoint_url, self.bucket, self.key)
        cache.put(ident, self._etag, self._size, chunks, self.pace.measured())

    def memory_bytes(self) -> int:
        """Bytes of tail / index held in memory (served without requests)."""
        with self._known_lock:
            return self._known.nbytes()

    # -- requests ------------------------------------------------------------------------
    def _head(self) -> tuple[int, str]:
        resp, _ = self._request("HEAD")
        return int(resp["ContentLength"]), str(resp.get("ETag") or "")

    def coalesce_gap(self) -> int:
        """The gap ``pread_many`` bridges.

        ``gap``, or with ``adaptive_gap`` what one request's latency is worth in bytes at
        the measured bandwidth (up to ``max_request``).
        """
        if not self.adaptive_gap:
            return self.gap
        return self.pace.gap(self.gap, self.max_request)

    def _get_parts(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; a long range as parallel ranged GETs of ``part_bytes``.

        Only called from the reading thread (never from the pool: no nested waits).
        """
        part = self.part_bytes
        if end - start <= 2 * part:
            return self._get_range(start, end)
        cuts = [*range(start, end, part), end]
        if cuts[-1] - cuts[-2] < part // 2:  # no runt at the end
            del cuts[-2]
        spans = list(zip(cuts, cuts[1:], strict=False))
        return b"".join(shared_pool().map(lambda g: self._get_range(g[0], g[1]), spans))

    def _get_range(self, start: int, end: int) -> bytes:
        kwargs: dict[str, Any] = {"Range": f"bytes={start}-{end - 1}"}
        if self._etag:
            kwargs["IfMatch"] = self._etag
        _, body = self._request("GET", expect=end - start, limit=end - start, **kwargs)
        return body

    def _request(
        self, method: str, expect: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> tuple[Any, bytes]:
        """One HTTP request with our retries around botocore's; errors come back typed.

        No more than ``limit`` body bytes are read: an answer longer than the range asked
        for (an endpoint that ignores ``Range``) is an :class:`S3Error`, not retried.
        """
        from botocore.exceptions import (
            NoCredentialsError,
            ParamValidationError,
            PartialCredentialsError,
        )

        try:
            client = shared_client(self.endpoint_url, self.region, self.retry)
        except ImportError:
            raise
        except Exception as exc:  # an endpoint, region or credentials botocore refuses
            raise setup_error(exc, self.bucket, self.key) from exc
        call: Callable[..., Any] = client.get_object if method == "GET" else client.head_object
        attempts = max(1, self.retry.attempts)
        sent = 0  # HTTP attempts of this request, botocore's retries included
        for attempt in range(attempts):
            bind_stats(self.stats)
            try:
                t0 = time.perf_counter()
                resp = call(Bucket=self.bucket, Key=self.key, **kwargs)
                body = self._body(resp, limit, t0) if method == "GET" else b""
                if expect is not None and len(body) != expect:
                    raise _ShortBody(f"got {len(body)} of {expect} bytes")
                self._count(nbytes=len(body), retried=max(0, sent_count() - 1))
                if sent_count() == 1:  # a retried request measures the retries
                    self.pace.observe(len(body), time.perf_counter() - t0)
                return resp, body
            except (NoCredentialsError, PartialCredentialsError, ParamValidationError) as exc:
                raise setup_error(exc, self.bucket, self.key) from exc
            except Exception as exc:
                self._count(retried=max(0, sent_count() - 1))
                sent += max(1, sent_count())
                retry = isinstance(exc, _ShortBody | _Stalled) or is_transient(exc)
                if retry and _retried_timeout(exc, sent_count()):
                    retry = False  # botocore retried this timeout: the endpoint hangs
                if retry and attempt + 1 < attempts:
                    self._count(retried=1)
                    time.sleep(self.retry.delay(attempt))
                    continue
                raise self._final_error(exc, method, sent, kwargs.get("Range")) from exc
            finally:
                bind_stats(None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _body(self, resp: Any, limit: int | None, t0: float) -> bytes:
        """The body of a ``GET`` answer, read before the attempt's deadline (from ``t0``)."""
        seconds = self.retry.deadline(limit if limit is not None else 0)
        deadline = None if seconds is None else t0 + seconds
        try:
            return _read_body(resp, limit, deadline, self.retry.read_timeout)
        except _Stalled as exc:
            rate = f"{self.retry.deadline_base:g} s + the range at {self.retry.min_rate:,.0f} B/s"
            raise _Stalled(f"{exc} by its deadline, {seconds:.2f} s ({rate})") from None

    def _final_error(
        self, exc: Exception, method: str, sent: int, byte_range: str | None = None
    ) -> S3Error:
        """The typed error for ``exc``, the last failure of a request of ``sent`` attempts."""
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            return map_client_error(exc, self.bucket, self.key, method)
        if isinstance(exc, _RangeIgnored):
            return S3Error(
                f"{method} of {self.name}: {exc}; the endpoint, or a proxy before it, ignores "
                "the Range header (ranged reads need one that honours it)",
                bucket=self.bucket,
                key=self.key,
                status=exc.status,
            )
        what = f"{self.name} ({byte_range})" if byte_range else self.name
        why = str(exc) if isinstance(exc, _Stalled) else f"{type(exc).__name__}: {exc}"
        return S3TransientError(
            f"{method} of {what} failed after {sent} attempts: {why}",
            bucket=self.bucket,
            key=self.key,
        )

    def _count(self, *, nbytes: int = 0, retried: int = 0, served: int = 0) -> None:
        st = self.stats
        with st.lock:
            st.bytes_fetched += nbytes
            st.retries += retried
            st.served_from_memory += served

    # -- pickling ------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # the tail travels (format detection is served from it); a central directory or
        # member index does not: a pickled archive carries its parsed index instead
        with self._known_lock:
            floor = (self._size or 0) - self.tail_bytes
            known = [
                (max(off, floor), data[max(0, floor - off) :])
                for off, data in self._known.chunks()
                if off + len(data) > floor
            ]
        return {
            "bucket": self.bucket,
            "key": self.key,
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "index_cache": self.index_cache,
            "gap": self.gap,
            "max_request": self.max_request,
            "tail_bytes": self.tail_bytes,
            "part_bytes": self.part_bytes,
            "adaptive_gap": self.adaptive_gap,
            "pace": self.pace,
            "retry": self.retry,
            "size": self._size,
            "etag": self._etag,
            "index_source": self.index_source,
            "known": known,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["bucket"],
            state["key"],
            endpoint_url=state["endpoint_url"],
            region=state["region"],
            index_cache=state["index_cache"],
            gap=state["gap"],
            max_request=state["max_request"],
            tail_bytes=state["tail_bytes"],
            retry=state["retry"],
            part_bytes=state.get("part_bytes", DEFAULT_PART_BYTES),
            adaptive_gap=state.get("adaptive_gap", True),
        )
        self.pace = state.get("pace") or RequestPace()
        self._size, self._etag = state["size"], state["etag"]
        self.index_source = state["index_source"]
        self._known = Extents(state["known"])


def _retried_timeout(exc: BaseException, sent: int) -> bool:
    """Whether ``exc`` is a timeout that botocore met on each of its ``sent`` (> 1) attempts.

    A hung endpoint times out every attempt: retrying botocore's retries again would cost
    ``attempts x botocore_attempts x read_timeout`` (six minutes with the defaults) before
    the error. A timeout while reading the body (after botocore's call) is retried by us.
    """
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    return sent > 1 and isinstance(exc, ReadTimeoutError | ConnectTimeoutError)


# Every source of this process: a forked child (a DataLoader worker reading through the
# parent's source) gets new locks for them, as the client module does for its own.
_live_sources: weakref.WeakSet[S3Source] = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    for source in list(_live_sources):
        source._fresh_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks_after_fork)


class _ShortBody(Exception):
    """The body ended before the requested range did (retried)."""


class _RangeIgnored(Exception):
    """The answer is longer than the range asked for (not retried)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class _Stalled(Exception):
    """The body did not arrive before the attempt's deadline (retried)."""


# Bytes asked of one socket read of a body read against a deadline.
_READ_CHUNK = 1 << 20


def _read_body(
    resp: Any, limit: int | None, deadline: float | None = None, read_timeout: float = 30.0
) -> bytes:
    """The body of a ``GET`` answer, reading no more than ``limit`` bytes (``None``: all).

    With a ``deadline`` (``time.perf_counter()`` value) a body still arriving then is
    :class:`_Stalled`, however steadily its bytes come.
    """
    stream = resp["Body"]
    if limit is None:
        return _read_until(stream, None, deadline, read_timeout)
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    declared = resp.get("ContentLength")
    too_long = declared is not None and declared > limit
    data = b"" if too_long else _read_until(stream, limit + 1, deadline, read_timeout)
    if len(data) > limit or too_long:
        stream.close()  # the rest is never read: the connection is dropped, not drained
        sent = declared if declared is not None else f"over {limit}"
        raise _RangeIgnored(f"sent {sent} bytes (HTTP {status}) for {limit} asked", status)
    return data


def _read_until(stream: Any, want: int | None, deadline: float | None, timeout: float) -> bytes:
    """Up to ``want`` bytes of ``stream`` (``None``: to its end), before ``deadline``.

    Read one socket read at a time, each allowed no longer than what is left of the
    deadline (urllib3 sets the socket's own timeout again for the connection's next
    request): a byte every few seconds keeps no read from timing out, not the request.
    """
    raw = getattr(stream, "_raw_stream", None)
    read1 = getattr(raw, "read1", None)
    if deadline is None or read1 is None:  # no deadline, or a stream we cannot read so
        return bytes(stream.read(want))
    pieces: list[bytes] = []
    got = 0
    while want is None or got < want:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise _Stalled(_stalled(got, want))
        if left < timeout:  # the socket's own timeout would outlast the deadline
            _socket_timeout(raw, left)
        try:
            piece = read1(_READ_CHUNK if want is None else min(_READ_CHUNK, want - got))
        except Exception as exc:
            if time.perf_counter() >= deadline:
                raise _Stalled(_stalled(got, want)) from exc
            raise
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


def _stalled(got: int, want: int | None) -> str:
    of = f" of {want - 1:,}" if want else ""
    return f"{got:,}{of} bytes of the body read"


def _socket_timeout(raw: Any, seconds: float) -> None:
    """Bound the next socket read of urllib3 response ``raw`` (best effort)."""
    from botocore.compat import set_socket_timeout

    # no socket (read to its end, closed): nothing to bound
    with contextlib.suppress(AttributeError, OSError):
        set_socket_timeout(raw, max(seconds, 0.001))


def open_s3_source(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    index_cache: S3IndexCache | str | os.PathLike[str] | bool | None = None,
    gap: int = DEFAULT_GAP,
    max_request: int = DEFAULT_MAX_REQUEST,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    retry: RetryPolicy | None = None,
    part_bytes: int = DEFAULT_PART_BYTES,
    adaptive_gap: bool = True,
) -> S3Source:
    """Open ``s3://bucket/key`` and read its tail (or its cached index).

    ``endpoint_url`` defaults to ``$CDML_EDGE_S3_ENDPOINT`` (else boto3's own resolution),
    ``region`` to ``$CDML_EDGE_S3_REGION`` (else the boto3 chain, else ``us-east-1``);
    ``index_cache`` (a folder or an :class:`S3IndexCache`) defaults to
    ``$CDML_EDGE_S3_INDEX_CACHE``, else the user's cache folder (``off``: no cache), bounded
    by ``$CDML_EDGE_S3_INDEX_CACHE_BYTES`` (default 256 MiB); ``False`` opens without one.
    Raises :class:`S3NotFoundError` / :class:`S3AccessError` naming bucket and key on 404 / 403.
    """
    bucket, key = parse_s3_url(url)
    endpoint_url = endpoint_url or os.environ.get(ENDPOINT_ENV) or None
    region = region or os.environ.get(REGION_ENV) or None
    if index_cache is None or index_cache is True:
        index_cache = index_cache_dir()
    elif index_cache is False:
        index_cache = None
    if index_cache is not None and not isinstance(index_cache, S3IndexCache):
        bound = size_from_env(INDEX_CACHE_BYTES_ENV, DEFAULT_INDEX_CACHE_BYTES)
        index_cache = S3IndexCache(index_cache, bound)
    source = S3Source(
        bucket,
        key,
        endpoint_url=endpoint_url,
        region=region,
        index_cache=index_cache,
        gap=gap,
        max_request=max_request,
        tail_bytes=tail_bytes,
        retry=retry,
        part_bytes=part_bytes,
        adaptive_gap=adaptive_gap,
    )
    source.open()
    return source
