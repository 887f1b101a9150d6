"""An endpoint (or a caching proxy before it) that ignores ``Range`` and sends whole objects.

A ranged ``GET`` answered ``200`` with the whole object was read to its end: at open the
whole object went into memory as the "tail" (a 20 GiB archive, 20 GiB of memory), and a
member read downloaded the object, found it longer than the range, and retried that four
times before an :class:`S3TransientError`. No more than the bytes asked for is read now;
more is an :class:`S3Error` (no retry mends it) naming the object and saying why.
"""

from __future__ import annotations

import http.client
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive.s3 import (
    RetryPolicy,
    S3Error,
    S3TransientError,
    open_s3_source,
)

BUCKET = "no-ranges"
KEY = "big/blob.bin"
POLICY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02, botocore_attempts=1)
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        st = self.server
        drop = {"range"} if st.ignore_ranges else set()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | drop}
        conn = http.client.HTTPConnection(*st.upstream, timeout=30)
        try:
            conn.request("GET", self.path, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        with st.lock:
            st.gets += 1
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:  # the client stopped reading: what the fixed code does
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    upstream: tuple[str, int]
    ignore_ranges = False
    gets = 0
    lock: threading.Lock


@pytest.fixture
def gateway(s3_server: S3Server) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    host, port = s3_server.url.removeprefix("http://").split(":")
    server.upstream, server.lock = (host, int(port)), threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def blob(s3_server: S3Server) -> bytes:
    data = random.Random(5).randbytes(3_000_000)
    s3_server.put(BUCKET, KEY, data)
    return data


def _open(gateway: _Server) -> Any:
    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    return open_s3_source(
        f"s3://{BUCKET}/{KEY}", endpoint_url=url, retry=POLICY, index_cache=False, tail_bytes=4096
    )


def _check(err: S3Error) -> None:
    assert not isinstance(err, S3TransientError), f"{type(err).__name__}: {err}"
    assert (err.bucket, err.key) == (BUCKET, KEY)
    assert f"s3://{BUCKET}/{KEY}" in str(err) and "Range" in str(err)


def test_whole_object_at_open_is_refused_not_held(gateway: _Server, blob: bytes) -> None:
    gateway.ignore_ranges = True
    with pytest.raises(S3Error) as info:
        src = _open(gateway)
        held = src.memory_bytes()
        raise AssertionError(f"opened, holding {held:,} bytes of a {len(blob):,}-byte object")
    _check(info.value)
    assert gateway.gets == 1


def test_whole_object_for_a_member_read_is_refused_once(gateway: _Server, blob: bytes) -> None:
    src = _open(gateway)
    assert src.pread(100, 4000) == blob[100:4100]
    gateway.ignore_ranges = True
    before = gateway.gets
    with pytest.raises(S3Error) as info:
        src.pread(200_000, 4000)
    _check(info.value)
    assert gateway.gets - before == 1, "the whole object was fetched again for each retry"
    with pytest.raises(S3Error) as many:
        src.pread_many([(10, 10), (2_500_000, 10)])
    _check(many.value)
