"""The Prometheus endpoint and /healthz, scraped over real HTTP."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdml_edge.health import Metrics, ProgressWatchdog, SdNotifier
from cdml_edge.window.payloads import HealthPayload


class FakeClock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get_json(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_metrics_scraped_over_http() -> None:
    m = Metrics(version="9.9", device="pi-7")
    m.items.labels(source="cam1", modality="image").inc(5)
    m.items.labels(source="mic", modality="audio").inc(2)
    m.windows.labels(source="cam1").inc()
    m.errors.labels(stage="decode").inc(3)
    m.dropped.labels(reason="spool_full").inc()
    m.bytes_written.labels(kind="spool").inc(4096)
    m.inference_latency.labels(model="ae").observe(0.004)
    m.inference_latency.labels(model="ae").observe(0.2)
    m.window_latency.labels(source="cam1").observe(1.5)
    m.queue_depth.labels(queue="windows").set(4)
    m.queue_bytes.labels(queue="windows").set(1 << 20)
    m.spool_bytes.set(12345)
    m.broker_connected.set(1)
    with m.serve("127.0.0.1", 0) as server:
        assert server.port > 0
        got = scrape(server.url)
    assert got[("cdml_edge_items_total", (("modality", "image"), ("source", "cam1")))] == 5
    assert got[("cdml_edge_items_total", (("modality", "audio"), ("source", "mic")))] == 2
    assert got[("cdml_edge_windows_total", (("source", "cam1"),))] == 1
    assert got[("cdml_edge_errors_total", (("stage", "decode"),))] == 3
    assert got[("cdml_edge_dropped_total", (("reason", "spool_full"),))] == 1
    assert got[("cdml_edge_disk_bytes_written_total", (("kind", "spool"),))] == 4096
    assert got[("cdml_edge_inference_latency_seconds_count", (("model", "ae"),))] == 2
    le_5ms = ("cdml_edge_inference_latency_seconds_bucket", (("le", "0.005"), ("model", "ae")))
    assert got[le_5ms] == 1
    assert got[("cdml_edge_window_latency_seconds_sum", (("source", "cam1"),))] == 1.5
    assert got[("cdml_edge_queue_depth", (("queue", "windows"),))] == 4
    assert got[("cdml_edge_queue_bytes", (("queue", "windows"),))] == 1 << 20
    assert got[("cdml_edge_spool_bytes", ())] == 12345
    assert got[("cdml_edge_broker_connected", ())] == 1
    assert got[("cdml_edge_build_info", (("device", "pi-7"), ("version", "9.9")))] == 1


def test_totals_fit_the_mqtt_health_payload() -> None:
    m = Metrics()
    m.items.labels(source="a", modality="csv").inc(7)
    m.items.labels(source="b", modality="csv").inc(1)
    m.windows.labels(source="a").inc(2)
    m.queue_depth.labels(queue="items").set(3)
    m.bytes_written.labels(kind="retention").inc(10)
    m.bytes_written.labels(kind="spool").inc(5)
    t = m.totals()
    assert t["items"] == 8 and t["windows"] == 2 and t["bytes_written"] == 15
    assert t["queue_depths"] == {"items": 3}
    assert t["broker_connected"] is False
    payload = HealthPayload(**t, seq=1, device="d")
    assert payload.items == 8


def test_two_instances_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    a.items.labels(source="x", modality="text").inc()
    assert b.totals()["items"] == 0


def test_healthz_ok_then_503_when_stalled() -> None:
    clock = FakeClock()
    wd = ProgressWatchdog(SdNotifier(environ={}), stall_after_s=10, clock=clock)
    m = Metrics()
    with m.serve("127.0.0.1", 0, watchdog=wd) as server:
        code, body = get_json(server.url + "/healthz")
        assert code == 200 and body["status"] == "ok" and body["last_progress_age_s"] is None
        wd.progress()
        clock.t += 4
        code, body = get_json(server.url + "/healthz")
        assert code == 200 and body["last_progress_age_s"] == 4
        wd.set_busy(5)
        clock.t += 12
        code, body = get_json(server.url + "/healthz")
        assert code == 503
        assert body["status"] == "stalled" and body["pending"] == 5
        assert body["last_progress_age_s"] == 16
        got = scrape(server.url)
        assert got[("cdml_edge_watchdog_stalled", ())] == 1
        assert got[("cdml_edge_last_progress_age_seconds", ())] == 16
        wd.progress()
        code, body = get_json(server.url + "/healthz")
        assert code == 200 and body["ok"] is True
        code, _ = get_json_404(server.url + "/nope")
        assert code == 404


def get_json_404(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_ipv6_hosts() -> None:
    """The address family follows the host: ``::1`` alone, and ``::`` for both families."""
    m = Metrics()
    m.items.labels(source="a", modality="csv").inc(3)
    with m.serve("::1", 0) as server:
        assert server.url.startswith("http://[::1]:")
        assert (
            scrape(server.url)[("cdml_edge_items_total", (("modality", "csv"), ("source", "a")))]
            == 3
        )
    with m.serve("::", 0) as server:
        assert server.url.startswith("http://[::1]:")
        assert get_json(server.url + "/healthz")[0] == 200
        assert get_json(f"http://127.0.0.1:{server.port}/healthz")[0] == 200  # IPv4 client too


def test_silent_client_is_cut_off() -> None:
    """A connection that never sends a request is closed after the per-request timeout."""
    m = Metrics()
    with m.serve("127.0.0.1", 0, request_timeout_s=0.2) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            assert s.recv(1) == b""  # the server closed it (the 30 s cap only guards the test)
        assert get_json(server.url + "/healthz")[0] == 200


def test_concurrency_is_bounded() -> None:
    """Never more than ``max_concurrent`` connections open: one more closes the oldest."""
    m = Metrics()
    with m.serve("127.0.0.1", 0, request_timeout_s=0.3, max_concurrent=2) as server:
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(6)]
        try:
            for s in socks:
                assert s.recv(1) == b""  # each one is handled (and timed out) in the end
        finally:
            for s in socks:
                s.close()
        assert get_json(server.url + "/healthz")[0] == 200
        assert server.peak_active == 2  # six silent clients, never more than two at once
        assert server.active <= 1  # at most the /healthz request just answered


def test_server_rejects_bad_limits() -> None:
    with pytest.raises(ValueError, match="max_concurrent"):
        Metrics().serve("127.0.0.1", 0, max_concurrent=0)
    with pytest.raises(ValueError, match="request_timeout_s"):
        Metrics().serve("127.0.0.1", 0, request_timeout_s=0)


def test_healthz_degraded_names_the_part_and_answers_503() -> None:
    m = Metrics()
    problems: dict[str, str] = {}
    with m.serve("127.0.0.1", 0, degraded=lambda: problems) as server:
        assert get_json(server.url + "/healthz")[0] == 200
        problems["spool"] = "append: No space left on device [ENOSPC]"
        code, body = get_json(server.url + "/healthz")
        assert code == 503 and body["status"] == "degraded"
        assert body["degraded"] == {"spool": "append: No space left on device [ENOSPC]"}
        problems.clear()
        assert get_json(server.url + "/healthz")[0] == 200


def test_bad_requests_get_an_answer_not_a_hang() -> None:
    m = Metrics()
    with m.serve("127.0.0.1", 0) as server:
        for raw, code in (
            (b"POST /healthz HTTP/1.1\r\n\r\n", b"405"),
            (b"nonsense\r\n\r\n", b"400"),
            (b"GET /x HTTP/1.1\r\nA: " + b"b" * 9000 + b"\r\n\r\n", b"431"),
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                s.sendall(raw)
                assert s.recv(64).split()[1] == code
