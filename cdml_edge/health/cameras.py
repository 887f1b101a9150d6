"""Per-camera health: the ``cameras`` of the health payload, Prometheus metrics, ``/healthz``.

:class:`CameraBoard` reads the camera sources' :class:`~cdml_edge.intake.camera.status.
CameraSnapshot` and the results counted by the metrics; it computes frames/s captured and
scored over the last 5 s or more (from samples taken whenever health is asked for).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cdml_edge.health.metrics import PREFIX, Metrics
from cdml_edge.intake.camera.source import CameraSource
from cdml_edge.intake.camera.status import CAMERA_STATES, CameraSnapshot
from cdml_edge.window.payloads import CameraHealth

RATE_SPAN_S = 5.0
"""Frames/s are measured over at least this long (when samples that old exist)."""
SAMPLES = 64


class _Rates:
    """Cumulative (captured, scored) counts sampled over time -> frames/s of each."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=SAMPLES)

    def add(self, now: float, captured: int, scored: int) -> tuple[float, float]:
        if not self._samples or now - self._samples[-1][0] >= 1.0:
            self._samples.append((now, captured, scored))
        base = None
        for sample in reversed(self._samples):
            if now - sample[0] >= RATE_SPAN_S:
                base = sample
                break
        if base is None and self._samples and now - self._samples[0][0] >= 1.0:
            base = self._samples[0]
        if base is None:
            return 0.0, 0.0
        span = now - base[0]
        return (captured - base[1]) / span, (scored - base[2]) / span


class CameraBoard:
    """Health of every camera source of the running configuration (:meth:`attach`)."""

    def __init__(self, metrics: Metrics, clock: Callable[[], float] = time.monotonic) -> None:
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._cameras: dict[str, CameraSource] = {}
        self._rates: dict[str, _Rates] = {}
        metrics.registry.register(_Collector(self))
        metrics.health_checks["cameras"] = self.check

    def attach(self, sources: Mapping[str, object]) -> None:
        """Watch the camera sources among ``sources``; a camera kept keeps its rates."""
        with self._lock:
            self._cameras = {n: s for n, s in sources.items() if isinstance(s, CameraSource)}
            self._rates = {n: self._rates.get(n, _Rates()) for n in self._cameras}

    def report(self) -> dict[str, CameraHealth]:
        """Each camera's health, as the health payload carries it."""
        scored = self._scored()
        now = self._clock()
        out: dict[str, CameraHealth] = {}
        with self._lock:
            for name, cam in self._cameras.items():
                snap = cam.health()
                fps_in, fps_out = self._rates[name].add(now, snap.frames, scored.get(name, 0))
                if snap.state != "streaming":  # the trailing average would still show frames
                    fps_in = 0.0
                out[name] = _payload(snap, fps_in, fps_out)
        return out

    def check(self) -> tuple[str | None, dict[str, Any]]:
        """``("camera_down", ...)`` when a camera is down past its grace, for ``/healthz``."""
        with self._lock:
            snaps = {n: c.health() for n, c in self._cameras.items()}
        detail = {
            n: {"state": s.state, "down_for_s": _round(s.down_for_s), "unhealthy": s.unhealthy}
            for n, s in snaps.items()
        }
        problem = "camera_down" if any(s.unhealthy for s in snaps.values()) else None
        return problem, detail

    def _scored(self) -> dict[str, int]:
        """Results published per source so far (the item latency histogram's count)."""
        out: dict[str, int] = {}
        for family in self._metrics.item_latency.collect():
            for sample in family.samples:
                if sample.name.endswith("_count"):
                    out[sample.labels["source"]] = int(sample.value)
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _payload(snap: CameraSnapshot, fps_captured: float, fps_scored: float) -> CameraHealth:
    return CameraHealth(
        state=snap.state,
        url=snap.url,
        since=snap.since,
        fps_captured=round(fps_captured, 2),
        fps_scored=round(fps_scored, 2),
        frames=snap.frames,
        last_frame_age_s=_round(snap.last_frame_age_s),
        down_for_s=_round(snap.down_for_s),
        outages=snap.outages,
        reconnects=snap.reconnects,
        failed_attempts=snap.failed_attempts,
        last_error=snap.last_error,
        unhealthy=snap.unhealthy,
        lag_s=_round(snap.lag_s),
        fell_behind=snap.fell_behind,
    )


class _Collector:
    """The ``cdml_edge_camera_*`` families, computed at scrape time."""

    def __init__(self, board: CameraBoard) -> None:
        self._board = board

    def describe(self) -> Iterator[Metric]:
        return iter(_families().values())

    def collect(self) -> Iterator[Metric]:
        f = _families()
        for name, h in self._board.report().items():
            for state in CAMERA_STATES:
                f["state"].add_metric([name, state], h.state == state)
            f["unhealthy"].add_metric([name], h.unhealthy)
            f["fps"].add_metric([name, "captured"], h.fps_captured)
            f["fps"].add_metric([name, "scored"], h.fps_scored)
            age = -1.0 if h.last_frame_age_s is None else h.last_frame_age_s
            f["age"].add_metric([name], age)
            f["down"].add_metric([name], h.down_for_s or 0.0)
            f["frames"].add_metric([name], h.frames)
            f["outages"].add_metric([name], h.outages)
            f["reconnects"].add_metric([name], h.reconnects)
            f["failed"].add_metric([name], h.failed_attempts)
            f["lag"].add_metric([name], -1.0 if h.lag_s is None else h.lag_s)
            f["behind"].add_metric([name], h.fell_behind)
        return iter(f.values())


def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    p, src = f"{PREFIX}_camera", ["source"]
    gauge, counter = GaugeMetricFamily, CounterMetricFamily
    return {
        "state": gauge(
            f"{p}_state", "1 for the camera's current state", labels=["source", "state"]
        ),
        "unhealthy": gauge(
            f"{p}_unhealthy", "1 while down longer than unhealthy_after", labels=src
        ),
        "fps": gauge(
            f"{p}_fps", "Frames/s captured and scored (last >= 5 s)", labels=["source", "stage"]
        ),
        "age": gauge(
            f"{p}_last_frame_age_seconds",
            "Seconds since the last frame (-1 before the first)",
            labels=src,
        ),
        "down": gauge(f"{p}_down_seconds", "Seconds without frames while down", labels=src),
        "frames": counter(f"{p}_frames", "Frames received", labels=src),
        "outages": counter(f"{p}_outages", "Times the camera went down", labels=src),
        "reconnects": counter(
            f"{p}_reconnects", "Outages ended by frames flowing again", labels=src
        ),
        "failed": counter(f"{p}_failed_attempts", "Opens or reads that failed", labels=src),
        "lag": gauge(
            f"{p}_lag_seconds",
            "How far grabs run behind the stream's clock (RTSP; -1 without a figure)",
            labels=src,
        ),
        "behind": counter(
            f"{p}_fell_behind", "Times the grabs fell 1 s or more behind the stream", labels=src
        ),
    }
