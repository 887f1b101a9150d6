"""Prometheus metrics of the agent (served over HTTP by :mod:`~cdml_edge.health.server`).

Everything lives on a private ``CollectorRegistry`` (no global state: two agents, or many tests,
in one process never collide). Names are prefixed ``cdml_edge_``.

The ``dropped`` reasons and the common ``errors`` stages are exported at 0 from the start: a
series that first appears with its first drop already counted would hide that drop from
``increase()``, and so from the alert on it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cdml_edge.health.server import (
    MAX_CONCURRENT_REQUESTS,
    REQUEST_TIMEOUT_S,
    Degraded,
    MetricsServer,
    Page,
)
from cdml_edge.health.watchdog import HealthState, ProgressWatchdog

PREFIX = "cdml_edge"
INFERENCE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WINDOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
DROP_REASONS = ("spool", "camera_budget_full", "camera_paused_skipped")
"""``cdml_edge_dropped_total`` reasons, exported at 0 before the first drop."""
ERROR_STAGES = ("read", "decode", "output", "pipeline", "reload", "window_retries")
"""``cdml_edge_errors_total`` stages every agent can have, exported at 0 before the first
error (others, a disk's or a camera's, appear with theirs)."""
DEGRADED_PARTS = ("spool", "retention", "quarantine", "mqtt")
"""Parts that can be degraded (``/healthz``'s ``degraded``), exported at 0 while they are not."""


class _CachedLabels:
    """``labels(...)`` remembered per label values: the hot path asks for the same few.

    prometheus-client validates and looks up the values under a lock on every call (about
    4 us); the agent asks several times per item. The children are bounded by the label
    values the configuration allows (sources, models, stages, reasons).
    """

    _cache: dict[Any, Any]

    def labels(self, *values: Any, **named: Any) -> Any:
        key = (values, tuple(named.items()))
        try:
            return self._cache[key]
        except AttributeError:
            self._cache = {}
        except KeyError:
            pass
        child = super().labels(*values, **named)  # type: ignore[misc]
        self._cache[key] = child
        return child


class _Counter(_CachedLabels, Counter):
    pass


class _Gauge(_CachedLabels, Gauge):
    pass


class _Histogram(_CachedLabels, Histogram):
    pass


def _stat(stats: Callable[[], Mapping[str, int]], key: str) -> float:
    return float(stats().get(key, 0))


class _RunTotals:
    """An output's counters over the run: a new output (a reload's) carries the old one's.

    The counters are read from the output's statistics at scrape time, and a new output's
    start at 0: without the carry they went back within one run, which Prometheus takes for
    a restart of the process.
    """

    def __init__(self) -> None:
        self._stats: Callable[[], Mapping[str, int]] = dict
        self._carried: dict[str, int] = {}
        self._lock = threading.Lock()

    def follow(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """Read ``stats`` from now on; those of another output than before carry the old ones."""
        with self._lock:
            if getattr(stats, "__self__", None) is not getattr(self._stats, "__self__", None):
                for key, value in self._stats().items():
                    if isinstance(value, int):
                        self._carried[key] = self._carried.get(key, 0) + value
            self._stats = stats

    def snapshot(self) -> dict[str, int]:
        """Every counter now: the output's, plus what the outputs before it counted."""
        with self._lock:
            now = {k: v for k, v in self._stats().items() if isinstance(v, int)}
            carried = dict(self._carried)
        return {k: now.get(k, 0) + carried.get(k, 0) for k in {*now, *carried}}


class _Acknowledged(Collector):
    """``cdml_edge_mqtt_published_total{kind}``: messages the broker acknowledged.

    ``live`` came from memory, ``spooled`` from the disk spool; read from the output's
    counters at scrape time (:class:`_RunTotals`: across reloads). Beside it
    ``cdml_edge_mqtt_refused_total``: PUBACKs that refused a message (MQTT 5; the message is
    kept and sent again, each refusal counts); ``cdml_edge_mqtt_connects_total`` and
    ``cdml_edge_mqtt_connect_failures_total``: a broker lost and back between two scrapes,
    or refusing every attempt, is an increase.
    """

    def __init__(self, totals: _RunTotals) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        s = self._totals.snapshot()
        family = CounterMetricFamily(
            f"{PREFIX}_mqtt_published",
            "MQTT messages acknowledged by the broker: live (from memory) or spooled (from disk)",
            labels=["kind"],
        )
        spooled = s.get("drained", 0)
        family.add_metric(["live"], max(0, s.get("acked", 0) - spooled))
        family.add_metric(["spooled"], spooled)
        yield family
        yield CounterMetricFamily(
            f"{PREFIX}_mqtt_refused",
            "MQTT messages the broker refused (each refusal; the message is sent again later)",
            value=s.get("rejected", 0),
        )
        yield CounterMetricFamily(
            f"{PREFIX}_mqtt_connects",
            "Connections the MQTT broker accepted (the first one included)",
            value=s.get("reconnects", 0),
        )
        yield CounterMetricFamily(
            f"{PREFIX}_mqtt_connect_failures",
            "Attempts to connect to the MQTT broker that failed (unreachable, refused, closed)",
            value=s.get("connect_failures", 0),
        )


class _Unwritten(Collector):
    """``cdml_edge_output_messages_failed_total``: messages the output could not write.

    Read from the output's ``failed`` stat at scrape time: the JSON-lines output's messages
    refused by a full or failing disk or a closed stdout, of every kind (results, written
    again later, and health, status and error events, lost); outputs without it read 0.
    Across reloads (:class:`_RunTotals`): the counter does not go back within a run.
    """

    def __init__(self, totals: _RunTotals) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            f"{PREFIX}_output_messages_failed",
            "Messages the output could not write (a full or failing disk under output.jsonl, "
            "a closed stdout): results are written again later, health and events are lost",
            value=self._totals.snapshot().get("failed", 0),
        )


class _Degraded(Collector):
    """``cdml_edge_degraded{part}``: 1 while a part works but not fully (read at scrape time).

    The parts of ``DEGRADED_PARTS`` are always there (0 while fine), any other part only
    while it is degraded; the same map as ``/healthz``'s ``degraded``.
    """

    def __init__(self) -> None:
        self.parts: Callable[[], Mapping[str, str]] = dict

    def collect(self) -> Iterator[Metric]:
        now = self.parts()
        family = GaugeMetricFamily(
            f"{PREFIX}_degraded",
            "1 while a part works but not fully (a full or failing disk, a refusing broker)",
            labels=["part"],
        )
        for part in sorted(set(DEGRADED_PARTS) | set(now)):
            family.add_metric([part], 1.0 if part in now else 0.0)
        yield family


class _Stalls(Collector):
    """``cdml_edge_stalls_total``: stalls of the watchdog since the start (read at scrape time).

    The gauge ``cdml_edge_watchdog_stalled`` shows a stall only while it lasts: one that
    ended between two scrapes, or that systemd ended by a restart, is counted here.
    """

    def __init__(self) -> None:
        self.watchdog: ProgressWatchdog | None = None

    def collect(self) -> Iterator[Metric]:
        count = 0 if self.watchdog is None else self.watchdog.state().stalls
        yield CounterMetricFamily(
            f"{PREFIX}_stalls",
            "Times pending work made no progress for the watchdog's stall time",
            value=count,
        )


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

    def __init__(
        self,
        *,
        version: str = "",
        device: str = "",
        dead: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.started_at = time.time()
        self._started_steady = time.monotonic()
        self.info = Info(f"{PREFIX}_build", "Agent version and device name", registry=self.registry)
        self.info.info({"version": version, "device": device})
        self.start_time = self._gauge("start_time_seconds", "Unix time the agent started")
        self.start_time.set(self.started_at)
        self._add_counters()
        self._add_latencies()
        self._add_queue_gauges()
        self._add_reload_gauges()
        self._output_totals = _RunTotals()
        self.registry.register(_Acknowledged(self._output_totals))
        self.registry.register(_Unwritten(self._output_totals))
        self._degraded = _Degraded()
        self.registry.register(self._degraded)
        self._stalls = _Stalls()
        self.registry.register(self._stalls)
        self.watchdog_stalled = self._gauge(
            "watchdog_stalled", "1 while pending work makes no progress"
        )
        self.last_progress_age = self._gauge(
            "last_progress_age_seconds",
            "Seconds since a window last completed (-1 before the first)",
        )
        self.last_progress_age.set(-1)
        self._watchdog: ProgressWatchdog | None = None
        self.health_checks: dict[str, Callable[[], tuple[str | None, Any]]] = {}
        """Extra ``/healthz`` checks by name: each returns (problem or None, detail)."""
        if dead is not None:
            self.attach_supervisor(dead)

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        return _Counter(f"{PREFIX}_{name}", doc, labels, registry=self.registry)

    def _gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return _Gauge(f"{PREFIX}_{name}", doc, labels, registry=self.registry)

    def _histogram(self, name: str, doc: str, label: str, buckets: Sequence[float]) -> Histogram:
        return _Histogram(f"{PREFIX}_{name}", doc, [label], buckets=buckets, registry=self.registry)

    def _add_counters(self) -> None:
        self.items = self._counter("items", "Items taken in", "source", "modality")
        self.windows = self._counter("windows", "Windows completed", "source")
        self.anomalies = self._counter("anomalies", "Results flagged anomalous", "source")
        self.errors = self._counter("errors", "Errors by pipeline stage", "stage")
        for stage in ERROR_STAGES:  # at 0 from the start: the first error is an increase
            self.errors.labels(stage=stage)
        self.dropped = self._counter("dropped", "Items or messages lost, by reason", "reason")
        for reason in DROP_REASONS:  # at 0 from the start: the first drop is an increase
            self.dropped.labels(reason=reason)
        self.bytes_written = self._counter(
            "disk_bytes_written",
            "Bytes written to local disk (retention ring, spool, quarantine)",
            "kind",
        )
        self.thread_deaths = self._counter(
            "thread_deaths",
            "Unexpected deaths of supervised threads (each restarted with backoff)",
            "thread",
        )
        self.on_done_skipped = self._counter(
            "on_done_skipped", "Source files on_done left: changed since scored, or gone", "reason"
        )
        self.threads_dead = self._gauge(
            "threads_dead", "Supervised threads dead now (not running again yet)"
        )
        self._dead_threads: Callable[[], Sequence[str]] = tuple

    def _add_latencies(self) -> None:
        self.inference_latency = self._histogram(
            "inference_latency_seconds",
            "onnxruntime run time per batch",
            "model",
            INFERENCE_BUCKETS,
        )
        self.window_latency = self._histogram(
            "window_latency_seconds",
            "Window close to results acknowledged",
            "source",
            WINDOW_BUCKETS,
        )
        self.item_latency = self._histogram(
            "item_latency_seconds",
            "Item arrival to its result published",
            "source",
            WINDOW_BUCKETS,
        )

    def _add_queue_gauges(self) -> None:
        self.queue_depth = self._gauge(
            "queue_depth", "Entries waiting in a pipeline queue", "queue"
        )
        self.queue_bytes = self._gauge("queue_bytes", "Bytes held by a pipeline queue", "queue")
        self.spool_bytes = self._gauge("spool_bytes", "Bytes in the disk spool")
        self.spool_records = self._gauge("spool_records", "Messages in the disk spool")
        self.outbox_messages = self._gauge("outbox_messages", "Messages in the in-memory outbox")
        self.outbox_bytes = self._gauge("outbox_bytes", "Bytes in the in-memory outbox")
        self.broker_connected = self._gauge(
            "broker_connected", "1 while connected to the MQTT broker"
        )

    def _add_reload_gauges(self) -> None:
        self.config_reload_ok = self._gauge(
            "config_last_reload_successful",
            "1 while the last reload of the configuration was taken (1 from the start), "
            "0 after a refused one",
        )
        self.config_reload_ok.set(1)
        self.config_reload_at = self._gauge(
            "config_last_reload_success_timestamp_seconds",
            "Unix time the running configuration was loaded (the start, or the last reload)",
        )
        self.config_reload_at.set(self.started_at)

    def reload_taken(self) -> None:
        """A reload applied the configuration on disk: it is the running one now."""
        self.config_reload_ok.set(1)
        self.config_reload_at.set(time.time())

    def reload_refused(self) -> None:
        """A reload was refused (or failed and went back): counted, and shown until one is taken.

        ``errors{stage="reload"}`` counts it; ``config_last_reload_successful`` is 0 until a
        reload is taken: the file on disk is not the running configuration, and the next
        start would refuse it too.
        """
        self.errors.labels(stage="reload").inc()
        self.config_reload_ok.set(0)

    def attach_output(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """Export the output's queues, spool, connection and acknowledgements.

        ``stats`` (the output's :meth:`stats`) is read at scrape time; call again after the
        output is rebuilt. Keys an output does not have (JSON lines) read 0. Its messages
        not written (``failed``) are ``output_messages_failed_total``.
        """
        gauges = {
            self.spool_bytes: "spool_bytes",
            self.spool_records: "spool_records",
            self.outbox_messages: "outbox_depth",
            self.outbox_bytes: "outbox_bytes",
            self.broker_connected: "broker_connected",
        }
        for gauge, key in gauges.items():
            gauge.set_function(functools.partial(_stat, stats, key))
        self._output_totals.follow(stats)

    def attach_degraded(self, degraded: Degraded) -> None:
        """Export ``degraded`` (part -> why, read at scrape time) as ``cdml_edge_degraded``."""
        self._degraded.parts = degraded

    def attach_watchdog(self, watchdog: ProgressWatchdog) -> None:
        """Export the watchdog's view (``watchdog_stalled``, ``last_progress_age_seconds``, ...).

        ``stalls_total`` too: each stall, counted from its start.
        """

        def _age() -> float:
            age = watchdog.state().last_progress_age_s
            return -1.0 if age is None else age

        self.watchdog_stalled.set_function(lambda: float(watchdog.state().stalled))
        self.last_progress_age.set_function(_age)
        self._stalls.watchdog = watchdog
        self._watchdog = watchdog

    def watchdog_state(self) -> HealthState | None:
        """The attached watchdog's view now (``None`` without one)."""
        return None if self._watchdog is None else self._watchdog.state()

    def attach_supervisor(self, dead: Callable[[], Sequence[str]]) -> None:
        """Export how many supervised threads are dead now (and name them in ``totals``)."""
        self._dead_threads = dead
        self.threads_dead.set_function(lambda: float(len(dead())))

    def _samples(self) -> list[Any]:
        """Every sample of the registry, collected once.

        Each collection calls every collector (the output's statistics among them): a
        report collects once, not once per total (12 times, 2.3 ms of the health thread).
        """
        return [sample for family in self.registry.collect() for sample in family.samples]

    def _sum(self, name: str, samples: list[Any] | None = None) -> float:
        return sum(s.value for s in (samples or self._samples()) if s.name == name)

    def _by_label(self, name: str, label: str, samples: list[Any] | None = None) -> dict[str, int]:
        return {
            s.labels[label]: int(s.value) for s in (samples or self._samples()) if s.name == name
        }

    def totals(self) -> dict[str, Any]:
        """Counter sums keyed like ``HealthPayload`` fields (items, windows, errors, ...)."""
        got = self._samples()

        def total(name: str) -> int:
            return int(self._sum(f"{PREFIX}_{name}", got))

        return {
            "items": total("items_total"),
            "windows": total("windows_total"),
            "errors": total("errors_total"),
            "dropped": total("dropped_total"),
            "bytes_written": total("disk_bytes_written_total"),
            "queue_depths": self._by_label(f"{PREFIX}_queue_depth", "queue", got),
            "outbox_depth": total("outbox_messages"),
            "outbox_bytes": total("outbox_bytes"),
            "spool_bytes": total("spool_bytes"),
            "spool_records": total("spool_records"),
            "broker_connected": self._sum(f"{PREFIX}_broker_connected", got) > 0,
            "thread_deaths": total("thread_deaths_total"),
            "dead_threads": list(self._dead_threads()),
            "uptime_s": self.uptime_s(),
        }

    def uptime_s(self) -> float:
        """Seconds since the start, on the steady clock: a step of the wall clock moves it not."""
        return round(time.monotonic() - self._started_steady, 3)

    def anomaly_count(self) -> int:
        """Results flagged anomalous since the start (not a health payload field)."""
        return int(self._sum(f"{PREFIX}_anomalies_total"))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def serve(
        self,
        host: str,
        port: int,
        *,
        watchdog: ProgressWatchdog | None = None,
        degraded: Degraded | None = None,
        page: Page | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_concurrent: int = MAX_CONCURRENT_REQUESTS,
    ) -> MetricsServer:
        """Serve ``/metrics`` and ``/healthz`` on ``host:port`` (port 0 = pick a free one).

        With a ``page``, the status page too, on ``/`` and ``/status``.

        ``host`` may be an IPv4 or IPv6 address or a name (``::`` listens on both families).
        With a watchdog, ``/healthz`` answers 503 while it reports a stall, and the watchdog's
        state is exported as metrics too; ``degraded`` names parts that work but not fully
        (503 ``degraded`` while it returns any; ``cdml_edge_degraded{part}`` 1 meanwhile).
        """
        if watchdog is not None:
            self.attach_watchdog(watchdog)
        if degraded is not None:
            self.attach_degraded(degraded)
        health = watchdog.state if watchdog is not None else None
        return MetricsServer(
            self,
            host,
            port,
            health=health,
            degraded=degraded,
            page=page,
            request_timeout_s=request_timeout_s,
            max_concurrent=max_concurrent,
        )
