"""``/healthz`` and ``/metrics`` never wait behind a status page being rendered.

The page makes thumbnails when it is read (a decode each): one slow render used to hold the
endpoint's one event loop, so a probe of ``/healthz`` waited for it, or timed out, and a
systemd or Kubernetes probe took a working agent for a dead one. The real server over real
HTTP; the page is a renderer that waits until the test lets it go.
"""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

from cdml_edge.health import Metrics


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as resp:
        resp.read()
        return int(resp.status)


def test_healthz_answers_while_a_page_renders() -> None:
    release = threading.Event()
    rendering = threading.Event()

    def slow_page(body: dict[str, Any]) -> str:
        rendering.set()
        release.wait(10)
        return "<p>page</p>"

    metrics = Metrics(version="t", device="d")
    with metrics.serve("127.0.0.1", 0, page=slow_page, request_timeout_s=8.0) as server:
        got: list[int] = []
        viewer = threading.Thread(target=lambda: got.append(_status(server.url + "/")))
        viewer.start()
        try:
            assert rendering.wait(5)
            assert _status(server.url + "/healthz") == 200  # while the page is held
            assert _status(server.url + "/metrics") == 200
        finally:
            release.set()
            viewer.join(10)
        assert got == [200]


def test_a_page_render_that_never_ends_is_cut_off_and_the_next_is_served() -> None:
    release = threading.Event()
    calls: list[int] = []

    def page(body: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 1:
            release.wait(10)  # the first render hangs past the request's deadline
        return "<p>page</p>"

    metrics = Metrics(version="t", device="d")
    with metrics.serve("127.0.0.1", 0, page=page, request_timeout_s=0.5) as server:
        try:
            try:
                _status(server.url + "/")
                raise AssertionError("a hung render must be cut off")
            except OSError:
                pass
            assert _status(server.url + "/healthz") == 200
        finally:
            release.set()
        assert _status(server.url + "/") == 200
