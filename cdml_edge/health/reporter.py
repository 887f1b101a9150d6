"""The agent's ``status`` and periodic ``health`` messages, published through its output.

Each interval the summary line is logged first, then the health message is handed to a
thread of its own: an output that blocks (a frozen disk under ``output.jsonl``, say) never
silences the log. While that message has not returned no other is sent, and each summary
line says for how long; a stall the watchdog sees is said too. Results to stdout whose reader
went away (:class:`~cdml_edge.outputs.jsonl.StdoutClosed`) stop the agent, in one line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from cdml_edge import __version__
from cdml_edge.config import AppConfig
from cdml_edge.health.cameras import CameraBoard
from cdml_edge.health.metrics import Metrics
from cdml_edge.health.summary import RunSummary
from cdml_edge.intake.camera.source import CameraStats
from cdml_edge.intake.factory import Source
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.jsonl import StdoutClosed, stop_for_closed_stdout
from cdml_edge.supervisor import Spawn, Worker, plain_thread
from cdml_edge.window.payloads import HealthPayload, StatusPayload
from cdml_edge.window.topics import OutMessage, Sequencer

log = logging.getLogger(__name__)

OUTPUT_KEYS = ("outbox_depth", "outbox_bytes", "spool_bytes", "spool_records")
"""Output counters that replace the metrics' own values in the health payload."""


class HealthReporter:
    """Publishes status and health for the agent's lifetime.

    :meth:`attach` after every (re)build points it at the running configuration, output and
    sources.
    """

    def __init__(
        self,
        metrics: Metrics,
        sequencer: Sequencer,
        started_at: float,
        degraded: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.metrics = metrics
        self.sequencer = sequencer
        self.started_at = started_at
        self._cfg: AppConfig | None = None
        self._output: Output | None = None
        self._sources: Mapping[str, Source] = {}
        self._skipped_seen: dict[str, int] = {}
        self._output_dropped_seen = 0
        self._health_failing = False  # the last health message could not be published
        self._thread: Worker | None = None
        self._stopped: threading.Event | None = None  # the agent's stop, once started
        self.cameras = CameraBoard(metrics)
        self.summary = RunSummary()
        self.last: HealthPayload | None = None
        self._build_lock = threading.Lock()
        self._sender: threading.Thread | None = None  # one, kept: no thread per interval
        self._send = threading.Condition()
        self._to_send: HealthPayload | None = None
        self._sending_since: float | None = None  # while a health message is being published
        self.degraded = degraded
        """Parts not fully working (the agent's view); in every health message."""

    def attach(self, cfg: AppConfig, output: Output, sources: Mapping[str, Source]) -> None:
        """Report on this configuration, output and sources from now on."""
        if output is not self._output:
            self._output_dropped_seen = 0  # a new output counts from 0
        self._cfg, self._output, self._sources = cfg, output, sources
        self._skipped_seen = {}
        self.cameras.attach(sources)

    def start(self, stopped: threading.Event, spawn: Spawn = plain_thread) -> None:
        """Publish health every ``health.interval`` until ``stopped`` is set (once only).

        The loop runs on a thread from ``spawn`` (the agent's supervisor).
        """
        self._stopped = stopped
        if self._thread is None:
            self._thread = spawn("health", lambda: self._loop(stopped))
            self._thread.start()

    def publish_status(self, state: str) -> None:
        """The retained ``status``, unless the MQTT publisher owns it (and its Last Will)."""
        assert self._cfg is not None and self._output is not None
        if self._cfg.mqtt is not None:
            return
        payload = StatusPayload(
            state=state,  # type: ignore[arg-type]
            version=__version__,
            started_at=self.started_at,
            device=self._cfg.device.id,
        )
        try:
            self._output.publish_batch(
                [OutMessage("status", payload.model_dump_json().encode(), retain=True)]
            )
        except StdoutClosed:
            self._stdout_closed()
        except OSError as exc:  # a full or failing disk under output.jsonl: said, not traced
            log.error("could not publish status %s: %s", state, exc)
        except Exception:
            log.exception("could not publish status %s", state)

    def publish_health(self) -> HealthPayload:
        """One ``health`` message: the metrics' totals, the output's queues, pending files."""
        return self._publish(self._payload(self.sequencer.next("health")))

    def _publish(self, payload: HealthPayload) -> HealthPayload:
        assert self._output is not None
        try:
            self._output.publish_batch([OutMessage("health", payload.model_dump_json().encode())])
            self._health_failing = False
        except StdoutClosed:
            self._stdout_closed()
        except OSError as exc:  # a full or failing disk under output.jsonl: said, not traced
            self._health_failed(exc)
        except Exception:
            log.exception("could not publish health")
        self.last = payload
        return payload

    def _health_failed(self, exc: OSError) -> None:
        """One line, at error the first time in a row, then at debug (every interval else)."""
        level = logging.DEBUG if self._health_failing else logging.ERROR
        self._health_failing = True
        log.log(level, "could not publish health: %s (said once until it works again)", exc)

    def _stdout_closed(self) -> None:
        """Results to stdout, whose reader went away: the agent stops (no traceback)."""
        if self._stopped is not None:
            stop_for_closed_stdout(self._stopped)

    def _payload(self, seq: int) -> HealthPayload:
        """The health payload now (``seq`` 0: only for a summary line, never published)."""
        with self._build_lock:
            return self._build(seq)

    def _build(self, seq: int) -> HealthPayload:
        assert self._cfg is not None and self._output is not None
        self._count_skipped_frames()
        out = self._output.stats()
        self._count_output_drops(out.get("dropped", 0))
        totals = self.metrics.totals()
        for key in OUTPUT_KEYS:
            if key in out:
                totals[key] = out[key]
        if "broker_connected" in out:
            totals["broker_connected"] = bool(out["broker_connected"])
        totals["bytes_written"] += out.get("bytes_written", 0)
        depths = dict(totals.pop("queue_depths", {}))
        depths.update({f"pending:{n}": s.pending_count for n, s in self._sources.items()})
        depths.update(
            {
                f"kept:{n}": f.kept
                for n, s in self._sources.items()
                if (f := getattr(s, "files", None)) is not None
            }
        )  # folder sources
        return HealthPayload(
            **totals,
            queue_depths=depths,
            cameras=self.cameras.report(),
            degraded=dict(self.degraded()),
            seq=seq,
            device=self._cfg.device.id,
        )

    def log_summary(self, final: bool = False, payload: HealthPayload | None = None) -> None:
        """Log the summary line of ``payload`` (default: the last health message).

        It counts since the line before, or with ``final`` the whole run.
        """
        h = payload or self.last
        if h is None or self._cfg is None:
            return
        line = self.summary.final if final else self.summary.interval
        problems = self._problems()
        log.info("%s", line(h, self.metrics.anomaly_count(), self._cfg.mqtt is not None, problems))

    def _problems(self) -> list[str]:
        """What the summary line says beside the payload: a stall, a blocked output."""
        out = []
        state = self.metrics.watchdog_state()
        if state is not None and state.stalled:
            out.append(
                f"stalled: {state.pending} pending, no progress for {state.stalled_for_s:.0f} s"
            )
        since = self._sending_since
        if since is not None:
            waited = time.monotonic() - since
            out.append(f"output blocked: a health message waits for {waited:.0f} s")
        return out

    def report(self) -> None:
        """One interval: the summary line, then the health message from a thread of its own.

        While the message before has not returned, none is sent (see the module).
        """
        if self._sending_since is not None:
            self.log_summary(payload=self._payload(seq=0))
            return
        payload = self._payload(self.sequencer.next("health"))
        self.log_summary(payload=payload)
        with self._send:
            self._sending_since = time.monotonic()
            self._to_send = payload
            self._send.notify()
        if self._sender is None or not self._sender.is_alive():
            self._sender = threading.Thread(target=self._send_loop, name="health-send", daemon=True)
            self._sender.start()

    def _send_loop(self) -> None:
        """Publish each health message handed over by :meth:`report`, one at a time."""
        while True:
            with self._send:
                while self._to_send is None:
                    self._send.wait()
                payload, self._to_send = self._to_send, None
            try:
                self._publish(payload)
            finally:
                self._sending_since = None

    def _count_skipped_frames(self) -> None:
        """Camera frames dropped since the last report (budget full, paused), as ``dropped``."""
        for name, src in self._sources.items():
            if not isinstance(src.stats, CameraStats):
                continue
            for reason, count in src.stats.drops().items():
                key = f"{name}/{reason}"
                delta = count - self._skipped_seen.get(key, 0)
                if delta > 0:
                    self.metrics.dropped.labels(reason=reason).inc(delta)
                self._skipped_seen[key] = count

    def _count_output_drops(self, dropped: int) -> None:
        """Messages the output dropped (its spool full) since the last report, as ``dropped``."""
        delta = (
            dropped - self._output_dropped_seen if dropped >= self._output_dropped_seen else dropped
        )
        if delta > 0:
            self.metrics.dropped.labels(reason="spool").inc(delta)
        self._output_dropped_seen = dropped

    def _loop(self, stopped: threading.Event) -> None:
        while True:
            assert self._cfg is not None
            if stopped.wait(self._cfg.health.interval):
                return
            self.report()
