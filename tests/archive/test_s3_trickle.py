"""An endpoint that trickles a body a byte at a time, each byte inside the read timeout.

The read timeout bounds one socket read, not a request: a server (or a proxy before it)
that sends one byte every 29 s never times out, so a ranged ``GET`` lasted as long as the
server liked, hanging a DataLoader worker or a replay. A request now has a deadline,
``deadline_base`` plus its bytes at ``min_rate`` (``RetryPolicy``); past it the attempt
is dropped, retried per the policy, and the last one raises :class:`S3TransientError`
naming the object and the byte range.

The server here is a real loopback HTTP server, threaded, one byte every 50 ms (the
client's read timeout is 5 s: no socket read ever times out).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cdml_edge.archive.s3 import RetryPolicy, S3TransientError, open_s3_source

BLOB = bytes(range(256)) * 16  # 4096 bytes
# 4096 bytes at 100 kB/s: a deadline of 0.3 + 0.04 s per attempt; trickled, they take 205 s
POLICY = RetryPolicy(
    attempts=2,
    base_delay=0.01,
    max_delay=0.02,
    botocore_attempts=1,
    read_timeout=5.0,
    min_rate=100_000,
    deadline_base=0.3,
)
BYTE_EVERY = 0.05
# the outcome is waited for this long at most (unfixed, a request lasts 205 s)
WAIT = 60.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TrickleServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        start, end = _span(self.headers.get("Range") or "", len(BLOB))
        with self.server.lock:
            self.server.ranges.append(self.headers.get("Range") or "")
            trickle = self.server.trickle
        body = BLOB[start:end]
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BLOB)}")
        self.send_header("ETag", '"trickle-1"')
        self.end_headers()
        try:
            if not trickle:
                self.wfile.write(body)
                return
            for i in range(len(body)):
                if self.server.stopping.wait(BYTE_EVERY):
                    break
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
        except OSError:  # the client gave up on the request
            pass
        self.close_connection = True


def _span(header: str, size: int) -> tuple[int, int]:
    m = re.match(r"bytes=(\d*)-(\d*)$", header.strip())
    if not m:
        return 0, size
    first, last = m.groups()
    if not first:
        return max(0, size - int(last)), size
    return int(first), min(size, int(last) + 1 if last else size)


class _TrickleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ranges: list[str] = []
        self.trickle = True
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_TrickleServer]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    srv = _TrickleServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.stopping.set()
    srv.shutdown()
    srv.server_close()


def _outcome(call: Callable[[], object]) -> BaseException | object:
    """What ``call`` returns or raises, run in a thread and waited for ``WAIT`` s at most."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert box, f"the request was still being read after {WAIT:.0f} s: no overall deadline"
    return box[0]


def _open(server: _TrickleServer) -> Any:
    return open_s3_source(
        "s3://bucket/line3/w-1.zip",
        endpoint_url=server.url,
        retry=POLICY,
        index_cache=False,
        tail_bytes=len(BLOB),
    )


def _check(err: object, byte_range: str, server: _TrickleServer) -> None:
    assert isinstance(err, S3TransientError), f"{type(err).__name__}: {err}"
    assert (err.bucket, err.key) == ("bucket", "line3/w-1.zip")
    message = str(err)
    assert "s3://bucket/line3/w-1.zip" in message and byte_range in message, message
    assert "deadline" in message, message
    with server.lock:  # each attempt was its own GET: retried per the policy
        assert server.ranges.count(byte_range) == POLICY.attempts, server.ranges


def test_a_trickled_tail_at_open_fails_at_the_deadline(server: _TrickleServer) -> None:
    t0 = time.monotonic()
    err = _outcome(lambda: _open(server))
    _check(err, f"bytes=-{len(BLOB)}", server)
    # figures for the report, not asserted: two attempts of a 0.34-s deadline each
    print(f"open failed after {time.monotonic() - t0:.2f} s")


def test_a_trickled_member_read_fails_at_the_deadline(server: _TrickleServer) -> None:
    server.trickle = False
    src = _open(server)
    assert src.pread(0, 16) == BLOB[:16]  # served from the tail held at open
    server.trickle = True
    src._known = type(src._known)()  # forget the tail: the next read is a GET
    err = _outcome(lambda: src.pread(100, 1000))
    _check(err, "bytes=100-1099", server)


def test_a_body_at_full_speed_is_read_whole(server: _TrickleServer) -> None:
    server.trickle = False
    src = _open(server)
    src._known = type(src._known)()
    assert src.pread(1000, 3000) == BLOB[1000:4000]
