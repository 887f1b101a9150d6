"""The HTTP endpoint of the agent's health: ``/metrics`` (Prometheus) and ``/healthz``.

With a page (``health.status_page``), the status page too, on ``/`` and ``/status``.

One asyncio event loop in one daemon thread serves every connection, so an idle or slow
client costs a few hundred bytes, never a thread or a slot others wait for. Each connection
has ``request_timeout_s`` in all to send its request head and read the answer (a client
dripping one byte at a time is cut off at that deadline, not per read); heads over 8 KiB
are refused. At most ``max_concurrent`` connections are open at once: one more closes the
oldest, so a crowd of idle clients can delay ``/healthz`` by nothing but its own turn.
One request per connection (``Connection: close``). The status page is rendered on one of
``PAGE_RENDERERS`` threads beside the loop (it makes thumbnails, a decode each): a slow
render delays no ``/healthz`` or ``/metrics``, and a render past the deadline is cut off too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST

from cdml_edge.health.watchdog import HealthState

if TYPE_CHECKING:
    from cdml_edge.health.metrics import Metrics

log = logging.getLogger(__name__)

# A scrape is one small request and answer: a client that takes longer is cut off.
REQUEST_TIMEOUT_S = 2.0
# Connections open at once; one more closes the oldest.
MAX_CONCURRENT_REQUESTS = 32
MAX_HEAD_BYTES = 8192
# Threads that render the status page; more page requests wait for one (within their time).
PAGE_RENDERERS = 2

Degraded = Callable[[], Mapping[str, str]]
"""Parts that work but not fully (a full disk under the spool, say): part -> why."""
Page = Callable[[dict[str, Any]], str]
"""The status page: HTML from the ``/healthz`` body."""
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
}
"""Headers of the status page: nothing but its own inline styles and data: images loads."""


def address_family(host: str, port: int) -> socket.AddressFamily:
    """The family of the first passive address ``host`` resolves to (``""`` = IPv4 any)."""
    if host == "":
        return socket.AF_INET
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


def _listen(host: str, port: int) -> socket.socket:
    family = address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        # "::" serves IPv4 clients too, whatever net.ipv6.bindv6only says.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``host:port`` until :meth:`close` (see the module).

    ``port`` is the bound port; ``active``, ``peak_active`` and ``served`` count
    connections (open now, most open at once, handled to the end).
    """

    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        health: Callable[[], HealthState] | None = None,
        degraded: Degraded | None = None,
        page: Page | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_concurrent: int = MAX_CONCURRENT_REQUESTS,
    ) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.metrics, self.health, self.degraded = metrics, health, degraded
        self.page = page
        self.timeout, self.max_open = request_timeout_s, max_concurrent
        self.host = host
        self.active = self.peak_active = self.served = 0
        self._open: OrderedDict[int, asyncio.StreamWriter] = OrderedDict()
        sock = _listen(host, port)
        self.port: int = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        # the page makes thumbnails (decodes): off the loop, so /healthz never waits for it
        self._renderer = ThreadPoolExecutor(PAGE_RENDERERS, thread_name_prefix="cdml-page")
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(sock, started), name="cdml-metrics", daemon=True
        )
        self._thread.start()
        started.wait()
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    def _run(self, sock: socket.socket, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, sock=sock, limit=MAX_HEAD_BYTES)
        )
        started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for writer in list(self._open.values()):
                writer.transport.abort()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()
            self._renderer.shutdown(wait=False, cancel_futures=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = id(writer)
        self._admit(key, writer)
        try:
            await asyncio.wait_for(self._serve(reader, writer), self.timeout)
        except (TimeoutError, asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # silent, slow or gone: cut off
        except Exception:  # noqa: BLE001 - one bad request never stops the server
            log.exception("metrics http: request failed")
        finally:
            self._open.pop(key, None)
            self.active = len(self._open)
            self.served += 1
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        code, data, ctype = await self._answer(reader)
        extra = PAGE_HEADERS if ctype.startswith("text/html") else None
        writer.write(_response(code, data, ctype, extra))
        await writer.drain()

    def _admit(self, key: int, writer: asyncio.StreamWriter) -> None:
        """Count the connection in; over the bound, close the oldest one."""
        if len(self._open) >= self.max_open:
            _, oldest = self._open.popitem(last=False)
            oldest.transport.abort()
        self._open[key] = writer
        self.active = len(self._open)
        self.peak_active = max(self.peak_active, self.active)

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, bytes, str]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return 431, b"request head too large\n", "text/plain"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request\n", "text/plain"
        if parts[0] != b"GET":
            return 405, b"only GET\n", "text/plain"
        path = parts[1].split(b"?", 1)[0]
        if path == b"/metrics":
            return 200, self.metrics.exposition(), CONTENT_TYPE_LATEST
        if path == b"/healthz":
            code, body = self._healthz()
            return code, json.dumps(body).encode(), "application/json"
        if path in (b"/", b"/status") and self.page is not None:
            _, body = self._healthz()
            page = await self._loop.run_in_executor(self._renderer, self.page, body)
            return 200, page.encode(), "text/html; charset=utf-8"
        return 404, b"not found: try /metrics or /healthz\n", "text/plain"

    def _healthz(self) -> tuple[int, dict[str, Any]]:
        state = self.health() if self.health else None
        problems = dict(self.degraded()) if self.degraded else {}
        return healthz_body(self.metrics, state, problems)

    @property
    def url(self) -> str:
        """``http://host:port`` to reach the server (loopback when it listens on any)."""
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and wait for the server's thread; a second call does nothing."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _response(code: int, data: bytes, ctype: str, extra: Mapping[str, str] | None = None) -> bytes:
    more = "".join(f"{k}: {v}\r\n" for k, v in (extra or {}).items())
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, '')}\r\nServer: cdml-edge\r\n{more}"
        f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


def healthz_body(
    metrics: Metrics, state: HealthState | None, degraded: Mapping[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body of ``/healthz``.

    200 ok; 503 ``stalled`` (pending work makes no progress), ``dead_threads`` (a supervised
    thread is dead), ``degraded`` (a part cannot do its job fully, e.g. the spool on a full
    disk; ``degraded`` names each part and why) or a failed check (e.g. ``camera_down``).
    """
    body: dict[str, Any] = {"status": "ok", "uptime_s": metrics.uptime_s()}
    if state is not None:
        body.update(state.as_dict())
        if state.stalled:
            body["status"] = "stalled"
        elif state.dead_threads:
            body["status"] = "dead_threads"
    if degraded:
        body["degraded"] = dict(degraded)
        if body["status"] == "ok":
            body["status"] = "degraded"
    for name, check in metrics.health_checks.items():  # e.g. cameras down past their grace
        problem, body[name] = check()
        if problem and body["status"] == "ok":
            body["status"] = problem
    return (200 if body["status"] == "ok" else 503), body
