"""The HTTP endpoint of the agent's health: ``/metrics`` (Prometheus) and ``/healthz``.

At most ``max_concurrent`` requests are handled at once, each connection with a socket
timeout; further clients wait in the kernel's listen backlog (never a new thread).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST

from cdml_edge.agent.health.watchdog import HealthState

if TYPE_CHECKING:
    from cdml_edge.agent.health.metrics import Metrics

log = logging.getLogger(__name__)

# A scrape is one small response: a client silent for this long is cut off.
REQUEST_TIMEOUT_S = 10.0
# Requests handled at once; further connections wait in the listen backlog (never a new thread).
MAX_CONCURRENT_REQUESTS = 4


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
    """HTTP status and JSON body of ``/healthz``: 200 ok, 503 stalled, a supervised thread
    dead or a failed check."""
    body: dict[str, Any] = {"status": "ok", "uptime_s": round(time.time() - metrics.started_at, 3)}
    if state is not None:
        body.update(state.as_dict())
        if state.stalled:
            body["status"] = "stalled"
        elif state.dead_threads:
            body["status"] = "dead_threads"
    for name, check in metrics.health_checks.items():  # e.g. cameras down past their grace
        problem, body[name] = check()
        if problem and body["status"] == "ok":
            body["status"] = problem
    return (200 if body["status"] == "ok" else 503), body


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
