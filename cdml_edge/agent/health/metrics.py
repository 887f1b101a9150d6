"""Prometheus metrics of the agent and the HTTP endpoint that serves ``/metrics`` and ``/healthz``.

Everything lives on a private ``CollectorRegistry`` (no global state: two agents, or many tests,
in one process never collide). Names are prefixed ``cdml_edge_``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from cdml_edge.agent.health.watchdog import HealthState, ProgressWatchdog

log = logging.getLogger(__name__)

PREFIX = "cdml_edge"
INFERENCE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WINDOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# A scrape is one small response: a client silent for this long is cut off.
REQUEST_TIMEOUT_S = 10.0
# Requests handled at once; further connections wait in the listen backlog (never a new thread).
MAX_CONCURRENT_REQUESTS = 4


class Metrics:
    """The agent's counters, gauges and histograms.

    Use the attributes directly (standard prometheus-client objects), e.g.::

        m = Metrics(version="0.1.0", device="line3-pi")
        m.items.labels(source="cam1", modality="image").inc()
        m.windows.labels(source="cam1").inc()
        m.errors.labels(stage="decode").inc()           # stage: read|decode|infer|publish|...
        m.dropped.labels(reason="spool_full").inc()     # anything lost, with why
        m.bytes_written.labels(kind="retention").inc(n) # every byte put on the SD card
        m.inference_latency.labels(model="ae").observe(seconds)
        m.window_latency.labels(source="cam1").observe(seconds)   # window closed -> acked
        m.queue_depth.labels(queue="windows").set(n); m.queue_bytes.labels(queue="windows").set(b)
        m.spool_bytes.set(b); m.spool_records.set(n)
        m.outbox_messages.set(n); m.outbox_bytes.set(b)
        m.broker_connected.set(1)
        server = m.serve("0.0.0.0", 9108, watchdog=wd)   # /metrics and /healthz
        ...
        server.close()

    ``totals()`` sums the counters into the fields of the MQTT health payload.
    """

    def __init__(self, *, version: str = "", device: str = "") -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.started_at = time.time()
        self.info = Info(f"{PREFIX}_build", "Agent version and device name", registry=r)
        self.info.info({"version": version, "device": device})
        self.start_time = Gauge(
            f"{PREFIX}_start_time_seconds", "Unix time the agent started", registry=r
        )
        self.start_time.set(self.started_at)
        self.items = Counter(
            f"{PREFIX}_items", "Items taken in", ["source", "modality"], registry=r
        )
        self.windows = Counter(f"{PREFIX}_windows", "Windows completed", ["source"], registry=r)
        self.errors = Counter(f"{PREFIX}_errors", "Errors by pipeline stage", ["stage"], registry=r)
        self.dropped = Counter(
            f"{PREFIX}_dropped", "Items or messages lost, by reason", ["reason"], registry=r
        )
        self.bytes_written = Counter(
            f"{PREFIX}_disk_bytes_written",
            "Bytes written to local disk (retention ring, spool, quarantine)",
            ["kind"],
            registry=r,
        )
        self.published = Counter(
            f"{PREFIX}_mqtt_published", "MQTT messages acknowledged", ["kind"], registry=r
        )
        self.inference_latency = Histogram(
            f"{PREFIX}_inference_latency_seconds",
            "onnxruntime run time per batch",
            ["model"],
            buckets=INFERENCE_BUCKETS,
            registry=r,
        )
        self.window_latency = Histogram(
            f"{PREFIX}_window_latency_seconds",
            "Window close to results acknowledged",
            ["source"],
            buckets=WINDOW_BUCKETS,
            registry=r,
        )
        self.item_latency = Histogram(
            f"{PREFIX}_item_latency_seconds",
            "Item arrival to its result published",
            ["source"],
            buckets=WINDOW_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            f"{PREFIX}_queue_depth", "Entries waiting in a pipeline queue", ["queue"], registry=r
        )
        self.queue_bytes = Gauge(
            f"{PREFIX}_queue_bytes", "Bytes held by a pipeline queue", ["queue"], registry=r
        )
        self.spool_bytes = Gauge(f"{PREFIX}_spool_bytes", "Bytes in the disk spool", registry=r)
        self.spool_records = Gauge(
            f"{PREFIX}_spool_records", "Messages in the disk spool", registry=r
        )
        self.outbox_messages = Gauge(
            f"{PREFIX}_outbox_messages", "Messages in the in-memory outbox", registry=r
        )
        self.outbox_bytes = Gauge(
            f"{PREFIX}_outbox_bytes", "Bytes in the in-memory outbox", registry=r
        )
        self.broker_connected = Gauge(
            f"{PREFIX}_broker_connected", "1 while connected to the MQTT broker", registry=r
        )
        self.watchdog_stalled = Gauge(
            f"{PREFIX}_watchdog_stalled", "1 while pending work makes no progress", registry=r
        )
        self.last_progress_age = Gauge(
            f"{PREFIX}_last_progress_age_seconds",
            "Seconds since a window last completed (-1 before the first)",
            registry=r,
        )
        self.last_progress_age.set(-1)

    def attach_watchdog(self, watchdog: ProgressWatchdog) -> None:
        """Export the watchdog's view as ``watchdog_stalled`` / ``last_progress_age_seconds``."""

        def _age() -> float:
            age = watchdog.state().last_progress_age_s
            return -1.0 if age is None else age

        self.watchdog_stalled.set_function(lambda: float(watchdog.state().stalled))
        self.last_progress_age.set_function(_age)

    def _sum(self, name: str) -> float:
        total = 0.0
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    total += sample.value
        return total

    def _by_label(self, name: str, label: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    out[sample.labels[label]] = int(sample.value)
        return out

    def totals(self) -> dict[str, Any]:
        """Counter sums keyed like ``HealthPayload`` fields (items, windows, errors, ...)."""
        return {
            "items": int(self._sum(f"{PREFIX}_items_total")),
            "windows": int(self._sum(f"{PREFIX}_windows_total")),
            "errors": int(self._sum(f"{PREFIX}_errors_total")),
            "dropped": int(self._sum(f"{PREFIX}_dropped_total")),
            "bytes_written": int(self._sum(f"{PREFIX}_disk_bytes_written_total")),
            "queue_depths": self._by_label(f"{PREFIX}_queue_depth", "queue"),
            "outbox_depth": int(self._sum(f"{PREFIX}_outbox_messages")),
            "outbox_bytes": int(self._sum(f"{PREFIX}_outbox_bytes")),
            "spool_bytes": int(self._sum(f"{PREFIX}_spool_bytes")),
            "spool_records": int(self._sum(f"{PREFIX}_spool_records")),
            "broker_connected": self._sum(f"{PREFIX}_broker_connected") > 0,
            "uptime_s": round(time.time() - self.started_at, 3),
        }

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def serve(
        self,
        host: str,
        port: int,
        *,
        watchdog: ProgressWatchdog | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_concurrent: int = MAX_CONCURRENT_REQUESTS,
    ) -> MetricsServer:
        """Serve ``/metrics`` and ``/healthz`` on ``host:port`` (port 0 = pick a free one).

        ``host`` may be an IPv4 or IPv6 address or a name (``::`` listens on both families).
        With a watchdog, ``/healthz`` answers 503 while it reports a stall, and the watchdog's
        state is exported as metrics too.
        """
        if watchdog is not None:
            self.attach_watchdog(watchdog)
        health = watchdog.state if watchdog is not None else None
        return MetricsServer(
            self,
            host,
            port,
            health=health,
            request_timeout_s=request_timeout_s,
            max_concurrent=max_concurrent,
        )


def address_family(host: str, port: int) -> socket.AddressFamily:
    """The family of the first passive address ``host`` resolves to (``""`` = IPv4 any)."""
    if host == "":
        return socket.AF_INET
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


class _BoundedHTTPServer(ThreadingHTTPServer):
    """One daemon thread per request, at most ``max_concurrent`` at a time.

    The accept loop waits for a free slot before it accepts the next connection, so a flood of
    clients queues in the kernel's listen backlog instead of growing threads.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        family: socket.AddressFamily,
        max_concurrent: int,
    ) -> None:
        self.address_family = family
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._count_lock = threading.Lock()
        self.active = 0
        self.peak_active = 0
        self.served = 0
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # "::" serves IPv4 clients too, whatever net.ipv6.bindv6only says.
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()
        with self._count_lock:
            self.active += 1
            self.peak_active = max(self.peak_active, self.active)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._count_lock:
            self.active -= 1
            self.served += 1
        self._slots.release()


class MetricsServer:
    """A small HTTP server with bounded concurrency; ``close()`` stops it.

    ``port`` is the bound port. Each connection gets ``request_timeout_s`` per socket
    operation; at most ``max_concurrent`` requests are handled at once.
    """

    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        health: Callable[[], HealthState] | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_concurrent: int = MAX_CONCURRENT_REQUESTS,
    ) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        handler = _make_handler(metrics, health, request_timeout_s)
        family = address_family(host, port)
        self._httpd = _BoundedHTTPServer((host, port), handler, family, max_concurrent)
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="cdml-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    @property
    def active(self) -> int:
        """Requests being handled now."""
        return self._httpd.active

    @property
    def peak_active(self) -> int:
        """The most requests ever handled at once."""
        return self._httpd.peak_active

    @property
    def served(self) -> int:
        """Connections handled to the end (answered, timed out or failed)."""
        return self._httpd.served

    @property
    def url(self) -> str:
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def healthz_body(metrics: Metrics, state: HealthState | None) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body of ``/healthz``: 200 ok, 503 stalled."""
    body: dict[str, Any] = {"status": "ok", "uptime_s": round(time.time() - metrics.started_at, 3)}
    if state is None:
        return 200, body
    body.update(state.as_dict())
    if state.stalled:
        body["status"] = "stalled"
        return 503, body
    return 200, body


def _make_handler(
    metrics: Metrics, health: Callable[[], HealthState] | None, timeout_s: float
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "cdml-edge"
        timeout = timeout_s  # socket timeout of every read and write on the connection

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                code, body = healthz_body(metrics, health() if health else None)
                self._send(code, json.dumps(body).encode(), "application/json")
            else:
                self._send(404, b"not found: try /metrics or /healthz\n", "text/plain")

        def _send(self, code: int, data: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("metrics http: " + format, *args)

    return Handler
