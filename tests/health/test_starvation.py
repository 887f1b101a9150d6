"""/healthz cannot be starved: every probe is answered quickly.

Many idle and slow (byte-dripping) connections to the real endpoint while a probe keeps asking.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.request

from cdml_edge.health import Metrics


def _probe(url: str) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
    return time.monotonic() - t0


def _drip(port: int, stop: threading.Event) -> None:
    """A slow client: a valid request head, one byte every 0.2 s, never finished."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 10_000:
                if stop.is_set():
                    return
                s.sendall(bytes([ch]))
                time.sleep(0.2)
    except OSError:
        return  # cut off by the server: expected


def test_idle_and_slow_clients_do_not_starve_healthz() -> None:
    m = Metrics()
    with m.serve("127.0.0.1", 0, request_timeout_s=1.0) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(100)]
        stop = threading.Event()
        drips = [
            threading.Thread(target=_drip, args=(server.port, stop), daemon=True) for _ in range(30)
        ]
        for t in drips:
            t.start()
        try:
            time.sleep(0.3)  # everyone is connected and holding on
            waits = [_probe(server.url) for _ in range(20)]
            # the idle connections did not wait for 1 s each: they are cut off by then
            time.sleep(1.5)
            closed = 0
            for s in idle:
                s.settimeout(0.1)
                with contextlib.suppress(TimeoutError, OSError):
                    closed += s.recv(1) == b""
            waits += [_probe(server.url) for _ in range(20)]
        finally:
            stop.set()
            for s in idle:
                s.close()
        print(
            f"[healthz] 100 idle + 30 slow clients: probe max {max(waits) * 1000:.0f} ms, "
            f"peak open {server.peak_active}"
        )
        assert max(waits) < 0.5, waits
        assert closed == 100  # every idle one was closed by the server
        assert server.peak_active <= 64  # bounded, whatever the clients do
