"""A real S3 HTTP server on loopback (moto's ThreadedMotoServer) behind a counting proxy.

Clients under test talk to :class:`CountingProxy`, which forwards every request unchanged to
moto and records method, range, status and body bytes, so request counts in tests come from
the wire and not from the code under test. The proxy can also inject faults (5xx,
throttling, truncated bodies, delays) for the retry tests.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from helpers.ports import free_port

REGION = "us-east-1"
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int


@dataclass
class Fault:
    kind: str  # "status" | "truncate" | "delay"
    method: str
    status: int = 503
    code: str = "SlowDown"
    seconds: float = 0.0


@dataclass
class ProxyState:
    upstream: tuple[str, int]
    seen: list[Seen] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, method: str) -> Fault | None:
        with self.lock:
            for i, f in enumerate(self.faults):
                if f.method == method:
                    return self.faults.pop(i)
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        st = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = st.take_fault(self.command)
        if fault is not None and fault.kind == "delay":  # the client times out and retries
            self._record(0, 0)
            time.sleep(fault.seconds)
            self.close_connection = True
            return
        if fault is not None and fault.kind == "status":
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{fault.code}</Code>'
                f"<Message>injected</Message></Error>"
            ).encode()
            self._record(fault.status, 0)
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*st.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                self.send_header(k, v)
        declared = int(resp.getheader("Content-Length") or len(data))
        self.send_header("Content-Length", str(declared if self.command == "HEAD" else len(data)))
        if fault is not None and fault.kind == "truncate":
            self.send_header("Connection", "close")
            half = data[: len(data) // 2]
            self._record(resp.status, len(half))
            self.end_headers()
            self.wfile.write(half)
            self.wfile.flush()
            self.close_connection = True
            return
        # record before the headers go out: a HEAD is complete for the client at end_headers()
        self._record(resp.status, len(data) if self.command != "HEAD" else 0)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _record(self, status: int, nbytes: int) -> None:
        st = self.server.state
        with st.lock:
            st.seen.append(Seen(self.command, self.path, self.headers.get("Range"), status, nbytes))

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward  # noqa: N815 - http.server's handler names


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    state: ProxyState


class CountingProxy:
    """HTTP proxy in front of moto that counts requests and injects faults."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.state = ProxyState(upstream=upstream)
        self._server = _ProxyServer(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- counting -----------------------------------------------------------------------
    def reset(self) -> None:
        with self.state.lock:
            self.state.seen.clear()
            self.state.faults.clear()

    def seen(self, method: str | None = None, key: str | None = None) -> list[Seen]:
        with self.state.lock:
            out = list(self.state.seen)
        if method:
            out = [s for s in out if s.method == method]
        if key:
            out = [s for s in out if s.path.split("?")[0].endswith("/" + key)]
        return out

    def count(self, method: str | None = None, key: str | None = None) -> int:
        return len(self.seen(method, key))

    def body_bytes(self, method: str | None = None) -> int:
        return sum(s.body_bytes for s in self.seen(method))

    # -- faults -------------------------------------------------------------------------
    def fail_next(
        self, n: int, *, status: int = 503, code: str = "SlowDown", method: str = "GET"
    ) -> None:
        with self.state.lock:
            self.state.faults.extend(Fault("status", method, status, code) for _ in range(n))

    def truncate_next(self, n: int, method: str = "GET") -> None:
        with self.state.lock:
            self.state.faults.extend(Fault("truncate", method) for _ in range(n))

    def delay_next(self, n: int, seconds: float, method: str = "GET") -> None:
        with self.state.lock:
            self.state.faults.extend(Fault("delay", method, seconds=seconds) for _ in range(n))


@dataclass
class S3Server:
    """Loopback moto server: ``url`` is moto itself, ``proxy.url`` the counted endpoint."""

    url: str
    proxy: CountingProxy

    def client(self, *, via_proxy: bool = False) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.proxy.url if via_proxy else self.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def make_bucket(self, name: str) -> None:
        c = self.client()
        with contextlib.suppress(c.exceptions.BucketAlreadyOwnedByYou):
            c.create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, data: bytes) -> str:
        self.make_bucket(bucket)
        etag = self.client().put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
        return str(etag)

    def set_auth(self, enabled: bool) -> None:
        """Turn moto's IAM authentication on (0 free requests) or off."""
        conn = http.client.HTTPConnection(*self.url.removeprefix("http://").split(":"))
        conn.request("POST", "/moto-api/reset-auth", body=b"0" if enabled else b"inf")
        conn.getresponse().read()
        conn.close()


@pytest.fixture(scope="module", name="s3_server")
def s3_server_fixture() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    cache = tempfile.mkdtemp(prefix="cdml-s3-index-")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        # the index cache is on by default: a folder of this module's own, not the user's
        "CDML_EDGE_S3_INDEX_CACHE": cache,
    }
    saved = {k: os.environ.get(k) for k in [*env, "AWS_PROFILE", "AWS_CONFIG_FILE"]}
    os.environ.update(env)
    os.environ.pop("AWS_PROFILE", None)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = CountingProxy(("127.0.0.1", port))
    try:
        yield S3Server(url=f"http://127.0.0.1:{port}", proxy=proxy)
    finally:
        proxy.stop()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(cache, ignore_errors=True)
