"""Per-process boto3 clients for ``s3://`` sources: retry settings, request counting.

One client per process and settings, created lazily and dropped after ``fork`` (the child
creates its own); a botocore ``before-send`` hook counts every HTTP attempt, retries
included, against the source whose request the current thread is sending.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from cdml_edge.archive.s3.settings import min_rate_from_env
from cdml_edge.backoff import backoff_delay

DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one request: botocore's own inside ours.

    Botocore's (``botocore_attempts``, standard mode) cover 5xx, throttling and timeouts;
    ours (``attempts``) also cover errors while reading the body and short bodies, with
    exponential backoff and full jitter between them. A timeout botocore has already
    retried is not retried again: a hung endpoint fails after ``botocore_attempts``
    timeouts (90 s with the defaults), not ``attempts`` times that many.

    ``read_timeout`` bounds one socket read, not a request: a server that trickles a byte
    inside each would never time out. Each attempt also has a deadline,
    :meth:`deadline` (``deadline_base`` plus its bytes at ``min_rate`` bytes/s); past it
    the attempt is dropped and retried like a broken body. ``min_rate`` defaults to
    ``$CDML_EDGE_S3_MIN_RATE`` (else 32 KiB/s); ``0`` turns the deadline off.
    """

    attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 5.0
    botocore_attempts: int = 3
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    min_rate: float = field(default_factory=min_rate_from_env)
    deadline_base: float = 60.0

    def deadline(self, nbytes: int) -> float | None:
        """Seconds one attempt to fetch ``nbytes`` may last in all (``None``: no bound)."""
        if self.min_rate <= 0:
            return None
        return self.deadline_base + nbytes / self.min_rate

    def delay(self, attempt: int) -> float:
        """Seconds to sleep before retry ``attempt`` (full jitter, at most ``max_delay``)."""
        return backoff_delay(attempt, self.base_delay, self.max_delay, jitter="full")


@dataclass
class S3Stats:
    """Per-process request counters of one source (HTTP attempts, retries included)."""

    requests: int = 0
    get_requests: int = 0
    head_requests: int = 0
    bytes_fetched: int = 0
    retries: int = 0
    served_from_memory: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def snapshot(self) -> dict[str, int]:
        """Every counter by name, read under the lock."""
        with self.lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}


# -- per-process clients and thread pool --------------------------------------------------
_proc_lock = threading.Lock()
_clients: dict[tuple[Any, ...], Any] = {}
_pool: ThreadPoolExecutor | None = None
_proc_pid = os.getpid()


def _after_fork() -> None:
    global _proc_lock, _pool, _proc_pid
    _proc_lock = threading.Lock()
    _clients.clear()
    _pool = None
    _proc_pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _check_pid() -> None:
    if _proc_pid != os.getpid():  # forked without the hook (or by a non-Python parent)
        _after_fork()


def shared_client(endpoint: str | None, region: str | None, policy: RetryPolicy) -> Any:
    """The boto3 S3 client for these settings, made once per process (thread-safe).

    Raises ``ImportError`` when boto3 is not installed.
    """
    _check_pid()
    key = (endpoint, region, policy.botocore_attempts, policy.connect_timeout, policy.read_timeout)
    client = _clients.get(key)
    if client is not None:
        return client
    with _proc_lock:
        client = _clients.get(key)
        if client is None:
            client = _make_client(endpoint, region, policy)
            _clients[key] = client
        return client


def _make_client(endpoint: str | None, region: str | None, policy: RetryPolicy) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("s3:// archives need boto3: pip install 'cdml-edge[s3]'") from exc
    session = boto3.session.Session()
    region = region or session.region_name or "us-east-1"
    options: dict[str, Any] = {
        "retries": {"mode": "standard", "total_max_attempts": policy.botocore_attempts},
        "connect_timeout": policy.connect_timeout,
        "read_timeout": policy.read_timeout,
        "max_pool_connections": max(10, DEFAULT_CONCURRENCY * 2),
    }
    if endpoint:
        options["s3"] = {"addressing_style": "path"}
    try:  # botocore >= 1.36: no checksum trailers S3-compatible stores may not know
        config = Config(
            **options,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
    except TypeError:  # pragma: no cover - older botocore
        config = Config(**options)
    client = session.client("s3", endpoint_url=endpoint, region_name=region, config=config)
    client.meta.events.register("before-send.s3", _on_send)
    return client


# The source whose request the current thread is sending (for per-source counting).
_current = threading.local()


def _on_send(request: Any, **_: Any) -> None:
    """botocore ``before-send`` hook: one call per HTTP attempt, retries included."""
    stats: S3Stats | None = getattr(_current, "stats", None)
    if stats is None:
        return None
    _current.sent = getattr(_current, "sent", 0) + 1
    method = str(getattr(request, "method", "")).upper()
    with stats.lock:
        stats.requests += 1
        if method == "GET":
            stats.get_requests += 1
        elif method == "HEAD":
            stats.head_requests += 1
    return None  # a non-None value would replace the HTTP response


def bind_stats(stats: S3Stats | None) -> None:
    """Count this thread's next HTTP attempts against ``stats`` (``None``: stop counting)."""
    _current.stats = stats
    _current.sent = 0


def sent_count() -> int:
    """HTTP attempts sent by this thread since :func:`bind_stats`."""
    return int(getattr(_current, "sent", 0))


def shared_pool() -> ThreadPoolExecutor:
    """The per-process thread pool that runs ranged ``GET``s in parallel."""
    global _pool
    _check_pid()
    with _proc_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(DEFAULT_CONCURRENCY, thread_name_prefix="cdml-s3")
        return _pool
