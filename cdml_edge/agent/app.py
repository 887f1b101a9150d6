"""The agent: sources -> windowers -> pack -> score -> output -> on_done, wired from the config.

:class:`Agent` owns every moving part. ``start()`` loads and warms up the models, starts the
output, the workers and the sources, then tells systemd it is ready. ``run()`` blocks until
``--duration`` elapses or a signal arrives: SIGTERM/SIGINT drain the windows in flight
within a deadline and return 0; SIGHUP reloads the configuration if it validates and its models
load and warm up, which is checked before anything stops (else the old one stays and
"reload refused: ..." is logged).

Bounds: every item read or captured holds bytes of the global
:class:`~cdml_edge.agent.windows.ByteBudget` (``limits.max_inflight_bytes``) until its window
has been handed to the output, so the window queue is bounded by bytes; above the budget
intake pauses (files stay on disk, camera frames are skipped and counted). An item is
charged what its window holds for it (:func:`window_charges`), not just its own bytes.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cdml_edge import __version__
from cdml_edge.agent.health import Metrics, MetricsServer, ProgressWatchdog, SdNotifier
from cdml_edge.agent.lifecycle import FileLifecycle
from cdml_edge.agent.outputs.base import Output
from cdml_edge.agent.outputs.factory import make_output
from cdml_edge.agent.sources import (
    CameraSource,
    CameraSpec,
    FileTooLarge,
    FolderSource,
    FolderSpec,
)
from cdml_edge.agent.windows import ByteBudget, Windower, WindowPolicy
from cdml_edge.config import AppConfig, ConfigError, SourceConfig, load_config
from cdml_edge.decode import EXTENSIONS
from cdml_edge.errors import CdmlError
from cdml_edge.model.runner import ModelOverrides, ModelRunner, load_runners
from cdml_edge.window.items import Window
from cdml_edge.window.pack import pack_window
from cdml_edge.window.payloads import HealthPayload, OutMessage, Sequencer, StatusPayload
from cdml_edge.window.score import error_event, process_window, warm_up_decoder

log = logging.getLogger(__name__)

Source = FolderSource | CameraSource

DATA_COPIES = 4  # the item, the packed archive, the member read back, one decoded copy
RESULT_BYTES = 4096  # per item: manifest entry, result record and its JSON message
WINDOW_ATTEMPTS = 3  # a file whose whole window failed this often is quarantined
RETRY_BACKOFF_S = 0.5  # first retry after 0.5 s, then 1 s, 2 s ...
OUTPUT_PAUSE_S = 1.0  # intake pause (and retry delay) after the output refused a window


class OutputFailed(CdmlError):
    """The output refused a window's messages (disk full, publisher closed): not the files'
    fault. They stay on disk and are taken again; their budget bytes are already released."""


def window_charges(budget: ByteBudget, runners: dict[str, ModelRunner]) -> None:
    """Set what one item costs the budget, per modality, from the loaded models.

    Besides ``DATA_COPIES`` copies of its bytes an item holds its prepared model input
    (float32), its row of the stacked batch and the intermediate float32 copies made while
    preparing it (one more input's worth), plus ``RESULT_BYTES`` for its records.
    """
    for modality, runner in runners.items():
        budget.item_extra[modality] = 3 * runner.input_bytes + RESULT_BYTES


def default_patterns(modality: str) -> tuple[str, ...]:
    """Glob patterns for a modality's usual file extensions."""
    exts = list(EXTENSIONS.get(modality, ()))
    if modality == "timeseries":
        exts += list(EXTENSIONS["csv"])
    pats = [f"*{e}" for e in exts] + [f"*{e.upper()}" for e in exts]
    return tuple(pats) or ("*",)


class Agent:
    """The running appliance (see the module docstring)."""

    def __init__(
        self,
        cfg: AppConfig,
        config_path: str | Path | None = None,
        *,
        output: Output | None = None,
        workers: int = 2,
        drain_timeout: float = 10.0,
    ) -> None:
        self.cfg = cfg
        self.config_path = Path(config_path) if config_path else None
        self._fixed_output = output
        self.workers = max(1, workers)
        self.drain_timeout = drain_timeout
        self.notifier = SdNotifier()
        self.metrics = Metrics(version=__version__, device=cfg.device.id)
        self.watchdog = ProgressWatchdog(self.notifier, cfg.health.stall_after)
        self.sequencer = Sequencer()
        self._server: MetricsServer | None = None
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._idle = threading.Condition()
        self._inflight = 0  # windows closed and not yet durable
        self._health_thread: threading.Thread | None = None
        self._attempts: dict[str, int] = {}  # item id -> failed windows (only files retried)
        self._attempts_lock = threading.Lock()
        self.started_at = time.time()
        self._build(cfg)

    # -- construction ----------------------------------------------------------------------
    def _build(self, cfg: AppConfig) -> None:
        self.cfg = cfg
        self.budget = ByteBudget(cfg.limits.max_inflight_bytes, data_factor=DATA_COPIES)
        self.lifecycle = FileLifecycle(cfg.quarantine.dir, cfg.quarantine.max_bytes)
        self.output: Output = self._fixed_output or make_output(cfg)
        self.runners: dict[str, ModelRunner] = {}
        self.retention: Any = None
        self._queue: queue.Queue[Window | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self.windowers: dict[str, Windower] = {}
        self.sources: dict[str, Source] = {}
        self._skipped_seen: dict[str, int] = {}
        for sc in cfg.sources:
            self.windowers[sc.name] = Windower(
                sc.name,
                WindowPolicy(sc.window.seconds, sc.window.max_items, sc.window.max_bytes),
                self._enqueue,
            )
            self.sources[sc.name] = self._make_source(sc, self.windowers[sc.name])

    def _make_source(self, sc: SourceConfig, windower: Windower) -> Source:
        def sink(item: Any) -> None:
            self.metrics.items.labels(source=sc.name, modality=item.modality).inc()
            windower.add(item)

        if sc.kind == "camera":
            spec = CameraSpec(
                name=sc.name,
                url=str(sc.url),
                fps=sc.fps or 5.0,
                jpeg_quality=sc.jpeg_quality,
                modality=sc.modality,
            )
            return CameraSource(spec, self.budget, sink, self._source_error)
        assert sc.path is not None
        fspec = FolderSpec(
            name=sc.name,
            path=sc.path,
            modality=sc.modality,
            patterns=tuple(sc.patterns) or default_patterns(sc.modality),
            stable_seconds=sc.stable_seconds,
            polling=sc.polling,
            max_file_bytes=sc.window.max_bytes,
        )
        return FolderSource(fspec, self.budget, sink, self._source_error)

    def source_config(self, name: str) -> SourceConfig:
        return next(s for s in self.cfg.sources if s.name == name)

    # -- start / stop ----------------------------------------------------------------------
    @staticmethod
    def load_models(cfg: AppConfig) -> dict[str, ModelRunner]:
        """Load and warm up the configured models (raises if one cannot be loaded)."""
        models: dict[str, tuple[str | Path, ModelOverrides]] = {
            m: (
                mc.path,
                ModelOverrides(mc.labels, mc.input_size, mc.anomaly_threshold, mc.providers),
            )
            for m, mc in cfg.models.items()
        }
        biggest: dict[str, int] = {}
        for sc in cfg.sources:
            biggest[sc.modality] = max(biggest.get(sc.modality, 1), min(sc.window.max_items, 256))
        return load_runners(models, warm_up=True, batch=biggest)

    def start(self, runners: dict[str, ModelRunner] | None = None) -> None:
        """Load + warm up models (unless ``runners`` are given, already loaded), start output,
        workers and sources; then READY=1."""
        cfg = self.cfg
        if cfg.health.watchdog:  # WATCHDOG=1 pings; READY/STOPPING are sent either way
            self.watchdog.start()
        else:
            self.watchdog.stop()  # a reload may have turned it off
        if cfg.health.metrics_port is not None and self._server is None:
            self._server = self.metrics.serve(
                cfg.health.metrics_host, cfg.health.metrics_port, watchdog=self.watchdog
            )
        self.runners = runners if runners is not None else self.load_models(cfg)
        window_charges(self.budget, self.runners)
        for modality in sorted({sc.modality for sc in cfg.sources}):
            try:
                warm_up_decoder(modality, self.runners.get(modality))
            except Exception as exc:  # a warm-up is an optimisation, never a reason to stop
                log.warning("warm-up of the %s decoder failed: %s", modality, exc)
        if cfg.retention is not None:
            from cdml_edge.store.retention import RetentionRing

            self.retention = RetentionRing.from_config(cfg.retention)
        self.output.start()
        for i in range(self.workers):
            t = threading.Thread(target=self._work_loop, name=f"pipeline-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        for w in self.windowers.values():
            w.start()
        for s in self.sources.values():
            s.start()
        if self._health_thread is None:
            self._health_thread = threading.Thread(
                target=self._health_loop, name="health", daemon=True
            )
            self._health_thread.start()
        self._publish_status("online")  # after the sources are armed: online means ready
        self.notifier.ready(f"running {len(self.sources)} sources, {len(self.runners)} models")
        log.info("agent ready: %d sources, models %s", len(self.sources), sorted(self.runners))

    def drain(self, timeout: float | None = None) -> bool:
        """Stop intake, close open windows and wait for windows in flight; ``True`` if all."""
        timeout = self.drain_timeout if timeout is None else timeout
        for s in self.sources.values():
            s.stop()
        for w in self.windowers.values():
            w.stop()
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._inflight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            drained = self._inflight == 0
        for _ in self._workers:
            self._queue.put(None)
        for t in self._workers:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        self._workers = []
        if not drained:
            log.warning("drain: %d windows still in flight after %.1fs", self._inflight, timeout)
        return drained

    def stop(self, timeout: float | None = None) -> bool:
        """Drain, publish ``offline``, stop the output and health; ``True`` if fully drained."""
        self.notifier.stopping()
        drained = self.drain(timeout)
        self._stop.set()
        self._publish_health()
        self._publish_status("offline")
        self.output.stop(timeout=5.0)
        if self.retention is not None:
            self.retention.close()
        self.watchdog.stop()
        if self._server is not None:
            self._server.close()
            self._server = None
        return drained

    def reload(self) -> bool:
        """Re-read the config; apply it if it validates, else keep the running one."""
        if self.config_path is None:
            log.warning("reload: no config file to read")
            return False
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload refused, keeping the running configuration:\n%s", exc)
            return False
        try:  # before anything stops: a config naming an unloadable model changes nothing
            runners = self.load_models(new)
        except Exception as exc:
            log.error("reload refused: %s (keeping the running configuration)", exc)
            self.metrics.errors.labels(stage="reload").inc()
            return False
        self.notifier.reloading()
        log.info("reloading %s", self.config_path)
        self.drain()
        self.output.stop(timeout=5.0)
        if self.retention is not None:
            self.retention.close()
        self._build(new)
        self.start(runners)
        return True

    def run(self, duration: float | None = None, install_signals: bool = True) -> int:
        """Start, serve until ``duration`` or SIGTERM/SIGINT, stop; the exit code."""
        if install_signals:
            self._install_signals()
        self.start()
        end = None if duration is None else time.monotonic() + duration
        while not self._stop.is_set():
            wait = 0.5 if end is None else max(0.0, min(0.5, end - time.monotonic()))
            if self._reload.wait(wait):
                self._reload.clear()
                self.reload()
            if end is not None and time.monotonic() >= end:
                break
        self.stop()  # windows still in flight after the deadline stay on disk: retaken next run
        return 0

    def _install_signals(self) -> None:
        def on_term(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: draining", signum)
            self._stop.set()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self._reload.set()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGHUP, on_hup)

    # -- the pipeline ----------------------------------------------------------------------
    def _enqueue(self, window: Window) -> None:
        with self._idle:
            self._inflight += 1
        self._queue.put(window)
        self._set_busy()

    def _set_busy(self) -> None:
        n = self._queue.qsize()
        self.metrics.queue_depth.labels(queue="windows").set(n)
        self.metrics.queue_bytes.labels(queue="inflight").set(self.budget.used)
        self.watchdog.set_busy(max(0, self._inflight))

    def _window_done(self) -> None:
        with self._idle:
            self._inflight -= 1
            self._idle.notify_all()
        self.watchdog.progress()
        self._set_busy()

    def _work_loop(self) -> None:
        while True:
            window = self._queue.get()
            if window is None:
                return
            try:
                self._process(window)
            except OutputFailed as exc:
                log.error("output failed for window %s, files kept for a retry: %s",
                          window.window_id, exc)
                self.metrics.errors.labels(stage="output").inc()
                self._output_failed(window)
                self._window_done()
            except Exception as exc:
                log.exception("window %s failed", window.window_id)
                self.metrics.errors.labels(stage="pipeline").inc()
                self._publish_errors(
                    [error_event(window.source, None, type(exc).__name__, str(exc),
                                 device=self.cfg.device.id, sequencer=self.sequencer)]
                )
                self._window_failed(window, exc)
                self.budget.release(window.charged)
                self._window_done()

    def _output_failed(self, window: Window) -> None:
        """Put the window's files back, pause intake for ``OUTPUT_PAUSE_S``; no attempt is
        counted against the files (camera frames are lost, counted by the error metric)."""
        src = self.sources.get(window.source)
        if src is None:
            return
        for it in window.items:
            if it.path is not None:
                src.retry(it.path, OUTPUT_PAUSE_S)
        for s in self.sources.values():
            s.pause(True)

        def resume() -> None:
            if not self._stop.is_set():
                for s in self.sources.values():
                    s.pause(False)

        t = threading.Timer(OUTPUT_PAUSE_S, resume)
        t.daemon = True
        t.start()

    def _window_failed(self, window: Window, exc: Exception) -> None:
        """Retry policy for a window that failed as a whole (a model error, say).

        Each of its files is taken again after a backoff (``RETRY_BACKOFF_S`` doubling per
        attempt); a file that was in ``WINDOW_ATTEMPTS`` failed windows is quarantined with
        an error event naming it. Camera frames are not retried (the window's error event
        counts them): the camera has moved on and holding frames would defeat the budget.
        """
        errors: list[OutMessage] = []
        for it in window.items:
            if it.path is None:
                continue
            with self._attempts_lock:
                n = self._attempts.get(it.item_id, 0) + 1
                self._attempts[it.item_id] = n
                if n >= WINDOW_ATTEMPTS:
                    self._attempts.pop(it.item_id, None)
            src = self.sources.get(window.source)
            if n < WINDOW_ATTEMPTS:
                if src is not None:
                    src.retry(it.path, RETRY_BACKOFF_S * 2 ** (n - 1))
                continue
            self.metrics.errors.labels(stage="window_retries").inc()
            dest = self.lifecycle.quarantine(window.source, it.name, it.path, None)
            if src is not None:
                src.release(it.path, keep=False)
            errors.append(
                error_event(window.source, it.name, type(exc).__name__,
                            f"failed in {n} windows, quarantined: {exc}",
                            device=self.cfg.device.id, sequencer=self.sequencer,
                            quarantined_path=str(dest) if dest else None)
            )
        if errors:
            self._publish_errors(errors)

    def _process(self, window: Window) -> None:
        sc = self.source_config(window.source)
        cfg = self.cfg
        packed = pack_window(
            window,
            device=cfg.device.id,
            modality=sc.modality,
            archive_format=cfg.pack.format,
            level=cfg.pack.level,
            site=cfg.device.site,
        )
        outcome = process_window(
            packed.archive,
            self.runners,
            device=cfg.device.id,
            segment_rows=sc.segment_rows,
            sequencer=self.sequencer,
            archive_name=packed.name,
            pack_ms=packed.pack_ms,
        )
        for model in {r.model for r in outcome.results}:
            if model != "none":
                self.metrics.inference_latency.labels(model=model).observe(
                    outcome.window.timings.infer_ms / 1000.0
                )
        failed_ids = {f.item.id for f in outcome.failures}
        by_id = {it.item_id: it for it in window.items}
        errors: list[OutMessage] = []
        for f in outcome.failures:
            it = by_id[f.item.id]
            self.metrics.errors.labels(stage="decode").inc()
            dest = self.lifecycle.quarantine(
                window.source, it.name, it.path, None if it.path else it.data
            )
            if dest is not None and it.path is None:
                self.metrics.bytes_written.labels(kind="quarantine").inc(len(it.data))
            if it.path is not None:
                self.sources[window.source].release(it.path, keep=False)
            errors.append(
                error_event(window.source, it.name, f.error_type, f.message,
                            device=cfg.device.id, sequencer=self.sequencer,
                            quarantined_path=str(dest) if dest else None)
            )
        if self.retention is not None:
            res = self.retention.store(packed.archive, outcome.manifest)
            if res.bytes_written:
                self.metrics.bytes_written.labels(kind="retention").inc(res.bytes_written)
            if res.status.value == "disk_full":  # counted; the live path goes on
                self.metrics.errors.labels(stage="retention_disk_full").inc()
            if res.event is not None:  # once per full-disk episode, and on recovery
                errors.append(error_event(window.source, None, res.event, res.error or "ok",
                                          device=cfg.device.id, sequencer=self.sequencer))
        done_paths = [it.path for it in window.items if it.path and it.item_id not in failed_ids]
        done_ids = [it.item_id for it in window.items if it.path]
        closed_ts = window.closed_ts
        source = window.source
        charged = window.charged
        del window, packed  # only paths travel into the callback, not the bytes

        def on_durable() -> None:
            with self._attempts_lock:
                for i in done_ids:
                    self._attempts.pop(i, None)
            for p in done_paths:
                self.lifecycle.finish(p, sc.on_done, sc.move_to)
                src = self.sources.get(source)
                if src is not None:
                    src.release(p, keep=sc.on_done == "keep")
            self.metrics.windows.labels(source=source).inc()
            self.metrics.window_latency.labels(source=source).observe(time.time() - closed_ts)
            self._window_done()

        msgs = outcome.messages() + errors
        now = time.time()
        for r in outcome.results:
            self.metrics.item_latency.labels(source=source).observe(max(0.0, now - r.ts))
        try:
            self.output.publish_batch(msgs, on_durable)
        except Exception as exc:
            raise OutputFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.budget.release(charged)  # the only release of a window that got this far

    def _source_error(
        self, source: str, name: str | None, exc: Exception, path: Path | None
    ) -> None:
        self.metrics.errors.labels(stage="read").inc()
        dest = None
        if isinstance(exc, FileTooLarge) and path is not None and name is not None:
            dest = self.lifecycle.quarantine(source, name, path, None)
        self._publish_errors(
            [error_event(source, name, type(exc).__name__, str(exc),
                         device=self.cfg.device.id, sequencer=self.sequencer,
                         quarantined_path=str(dest) if dest else None)]
        )

    def _publish_errors(self, msgs: list[OutMessage]) -> None:
        try:
            self.output.publish_batch(msgs)
        except Exception:
            log.exception("could not publish %d error events", len(msgs))

    # -- status / health -------------------------------------------------------------------
    def _publish_status(self, state: str) -> None:
        if self.cfg.mqtt is not None:
            return  # the MQTT publisher owns the retained status (and its Last Will)
        payload = StatusPayload(
            state=state,  # type: ignore[arg-type]
            version=__version__,
            started_at=self.started_at,
            device=self.cfg.device.id,
        )
        try:
            self.output.publish_batch(
                [OutMessage("status", payload.model_dump_json().encode(), retain=True)]
            )
        except Exception:
            log.exception("could not publish status %s", state)

    def _health_loop(self) -> None:
        while not self._stop.wait(self.cfg.health.interval):
            self._publish_health()

    def _publish_health(self) -> None:
        for name, src in self.sources.items():
            skipped = src.stats.skipped
            delta = skipped - self._skipped_seen.get(name, 0)
            if delta > 0:
                self.metrics.dropped.labels(reason="camera_budget_full").inc(delta)
            self._skipped_seen[name] = skipped
        totals = self.metrics.totals()
        out = self.output.stats()
        for key in ("outbox_depth", "outbox_bytes", "spool_bytes", "spool_records"):
            if key in out:
                totals[key] = out[key]
        if "broker_connected" in out:
            totals["broker_connected"] = bool(out["broker_connected"])
        totals["dropped"] += out.get("dropped", 0)
        totals["bytes_written"] += out.get("bytes_written", 0)
        depths = dict(totals.pop("queue_depths", {}))
        depths.update({f"pending:{n}": s.pending_count for n, s in self.sources.items()})
        payload = HealthPayload(
            **totals,
            queue_depths=depths,
            seq=self.sequencer.next("health"),
            device=self.cfg.device.id,
        )
        try:
            self.output.publish_batch([OutMessage("health", payload.model_dump_json().encode())])
        except Exception:
            log.exception("could not publish health")


def run_agent(config_path: str | Path, duration: float | None = None) -> int:
    """Load the config and run the agent (the ``cdml-edge run`` command)."""
    cfg = load_config(config_path)
    return Agent(cfg, config_path).run(duration)
