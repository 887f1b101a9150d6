"""The agent: sources -> windowers -> workers -> output, wired from the config.

:class:`Agent` builds and owns every moving part and keeps the wiring: build, start (named
steps), stop, drain, reload, run and the signals. The policies are small objects beside it:
``pipeline.WindowPipeline`` (the work on one window), ``retry.WindowRetryPolicy`` (failed
windows), ``runners`` (loading, warm-up, budget charges), ``health.reporter.HealthReporter``
(status and health messages), ``error_events.ErrorReporter`` (error events) and
``intake.factory.make_source``. Every long-lived thread is started by the ``supervisor``: a
death is counted (``thread_deaths``), published as a ``ThreadDied`` error event, makes
``/healthz`` answer 503 and stops the systemd watchdog pings until the thread runs again.

``run()`` blocks until ``--duration`` elapses or a signal arrives: SIGTERM/SIGINT drain the
windows in flight within a deadline and return 0; SIGHUP reloads the configuration if it
validates and its models load and warm up, which is checked before anything stops (else the
old one stays and "reload refused: ..." is logged). The handlers are put back on return.

Bounds: every item holds bytes of the global :class:`~cdml_edge.intake.budget.ByteBudget`
(``limits.max_inflight_bytes``) until its window has been handed to the output, charged what
its window holds for it (:func:`~cdml_edge.agent.runners.window_charges`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from cdml_edge import __version__
from cdml_edge.agent.error_events import ErrorReporter
from cdml_edge.agent.failing import FailingSources
from cdml_edge.agent.pipeline import OutputFailed, WindowPipeline
from cdml_edge.agent.preflight import check_files, check_models, unscored_warning
from cdml_edge.agent.retry import (
    RETRY_BACKOFF_S,
    WINDOW_ATTEMPTS,
    Attempts,
    OutputRefusals,
    WindowRetryPolicy,
)
from cdml_edge.agent.runners import DATA_COPIES, load_models, warm_up_decoders, window_charges
from cdml_edge.agent.startup import StartupClock, limit_blas_threads
from cdml_edge.agent.state import StateLock
from cdml_edge.agent.workers import WindowWorkers
from cdml_edge.config import AppConfig, ConfigError, SourceConfig, load_config
from cdml_edge.config.checks import no_sources_warning
from cdml_edge.decode.limits import DecodeLimits, set_charge, set_limits
from cdml_edge.health import ActivityBoard, Metrics, MetricsServer, ProgressWatchdog, SdNotifier
from cdml_edge.health.observed import ObservedOutput
from cdml_edge.health.page import render_page
from cdml_edge.health.reporter import HealthReporter
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.factory import Source, make_source
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.windower import PipelineGate, Windower, WindowPolicy
from cdml_edge.model.runner import ModelRunner, ModelUnusable
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.factory import (
    degraded_parts,
    give_up_held,
    held_windows,
    make_output,
    mqtt_leaves,
    on_disk_event,
)
from cdml_edge.outputs.homeassistant import announce
from cdml_edge.supervisor import Supervisor
from cdml_edge.units import counted
from cdml_edge.window.items import Item, Window
from cdml_edge.window.topics import Sequencer

if TYPE_CHECKING:
    from cdml_edge.store.retention import RetentionRing

log = logging.getLogger(__name__)

__all__ = [
    "DATA_COPIES",
    "WINDOW_ATTEMPTS",
    "Agent",
    "OutputFailed",
    "make_output",
    "run_agent",
    "window_charges",
]


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
        self._made_output: Output | None = None  # the output a configuration made
        self._output_started = False
        self.workers = max(1, workers)
        self.drain_timeout = drain_timeout
        self.started_at = time.time()
        self.notifier = SdNotifier()
        self.supervisor = Supervisor(on_death=self._thread_died)
        self.metrics = Metrics(version=__version__, device=cfg.device.id, dead=self.supervisor.dead)
        self.watchdog = ProgressWatchdog(
            self.notifier, cfg.health.stall_after, dead=self.supervisor.dead
        )
        self.metrics.attach_watchdog(self.watchdog)  # the summary line's stall, port or not
        # each part's deaths exported at 0 from its start: an alert's increase() sees the first
        self.supervisor.on_spawn = self._thread_spawned
        self.sequencer = Sequencer()
        self.failing = FailingSources()
        self.health = HealthReporter(
            self.metrics, self.sequencer, self.started_at, degraded=self.degraded
        )
        self.pipeline = WindowWorkers(
            self._busy,
            self.watchdog.progress,
            spawn=self.supervisor.spawn,
            on_lost=self._window_lost,
        )
        self._proc: WindowPipeline | None = None  # what the workers run, since the last start
        self.attempts = Attempts()  # kept across reloads
        self.refusals = OutputRefusals()  # kept across reloads
        self._server: MetricsServer | None = None
        self._at: tuple[str, int | None] = ("", None)  # where the server listens
        self.view: ActivityBoard | None = None  # the status page's board (health.status_page)
        self._state: StateLock | None = None
        self._stop = threading.Event()
        self._reload = threading.Event()
        if cfg.state_dir is not None:  # before the spool inside it: "state folder in use"
            self.init_state_lock()
        try:
            self._build(cfg)
        except BaseException:
            self.close_state_lock()
            raise

    # -- construction ----------------------------------------------------------------------
    def _build(self, cfg: AppConfig, *, keep_output: bool = False) -> None:
        """What ``cfg`` decides (models, retention: start()); ``keep_output``: the running one."""
        self.cfg = cfg
        set_limits(DecodeLimits.of(cfg.limits))  # every decode from here on
        self.budget = ByteBudget(cfg.limits.max_inflight_bytes, data_factor=DATA_COPIES)
        set_charge(self.budget.take, self.budget.release)  # a decode holds what it allocates
        self.lifecycle = FileLifecycle(
            cfg.quarantine.dir,
            cfg.quarantine.max_bytes,
            file_mode=cfg.quarantine.file_mode,
            on_skip=lambda reason: self.metrics.on_done_skipped.labels(reason=reason).inc(),
            # the error reporter is built from the output below; these reach it when called
            on_event=lambda kind, info: self.errors.disk_event(kind, info),
            on_late=lambda source, name, dest: self.errors.quarantined_late(source, name, dest),
        )
        self.output: Output = self._make_output(cfg, keep_output)
        spawn = self.supervisor.spawn
        self.view = (self.view or ActivityBoard(cfg.device.id)) if cfg.health.status_page else None
        if self.view is not None:
            self.output = ObservedOutput(self.output, self.view)
        self.errors = ErrorReporter(
            self.output,
            cfg.device.id,
            self.sequencer,
            self.metrics,
            self.lifecycle,
            [sc.name for sc in cfg.sources],
        )
        on_disk_event(self.output, self.errors.disk_event)
        self.runners: dict[str, ModelRunner] = {}
        self.retention: RetentionRing | None = None
        self.windowers: dict[str, Windower] = {}
        self.sources: dict[str, Source] = {}
        self.gate = PipelineGate(self.workers)  # windows closing when a worker is free
        for sc in cfg.sources:
            w = sc.window
            windower = Windower(
                sc.name,
                WindowPolicy(w.seconds, w.max_items, w.max_bytes, w.close_when_idle),
                self.pipeline.put,
                spawn=spawn,
                gate=self.gate,
            )
            self.windowers[sc.name] = windower
            self.sources[sc.name] = make_source(
                sc,
                self.budget,
                self._intake(sc, windower),
                self.errors.source_error,
                self.errors.camera_change,
                spawn,
                state_dir=cfg.state_dir,
            )
        self.retry = self._retry_policy()
        self.health.attach(cfg, self.output, self.sources)
        self.metrics.attach_output(self.output.stats)

    def _make_output(self, cfg: AppConfig, keep: bool) -> Output:
        """The output of ``cfg``: the running one when ``keep`` (see :meth:`_build`)."""
        if not keep or self._made_output is None:
            self._made_output = self._fixed_output or make_output(cfg, self.supervisor.spawn)
            self._output_started = False
        return self._made_output

    def _retry_policy(self) -> WindowRetryPolicy:
        """What becomes of the files of a window that failed or that the output refused."""
        return WindowRetryPolicy(
            self.sources,
            self.lifecycle,
            self.errors,
            self.metrics,
            self.attempts,
            self._stop,
            self.refusals,
        )

    def _intake(self, sc: SourceConfig, windower: Windower) -> Callable[[Item], None]:
        def sink(item: Item) -> None:
            if not self.retry.taken_again(item.item_id):  # a file taken again counts once
                self.metrics.items.labels(source=sc.name, modality=item.modality).inc()
            windower.add(item)

        return sink

    def _processor(self) -> WindowPipeline:
        return WindowPipeline(
            cfg=self.cfg,
            runners=self.runners,
            output=self.output,
            budget=self.budget,
            sources=self.sources,
            lifecycle=self.lifecycle,
            metrics=self.metrics,
            errors=self.errors,
            attempts=self.attempts,
            retry=self.retry,
            done=self.pipeline.done,
            retention=self.retention,
            gate=self.gate,
            view=self.view,
            failing=self.failing,
        )

    def _thread_spawned(self, thread: str) -> None:
        """A supervised part was made: its deaths are exported, at 0, from now on."""
        self.metrics.thread_deaths.labels(thread=thread)

    def _thread_died(self, thread: str, exc: BaseException, delay: float) -> None:
        """A supervised thread died: counted, and an error event published.

        The event goes on ``{source}/error`` for a source's thread (``src-<source>``,
        ``windower-<source>``), else on ``agent/error``. Published from a short-lived thread:
        the output may be what died, or be blocked.
        """
        self.metrics.thread_deaths.labels(thread=thread).inc()
        kind, _, rest = thread.partition("-")
        source = rest if kind in ("src", "windower") and rest in self.sources else "agent"
        msg = self.errors.event(
            source,
            None,
            "ThreadDied",
            f"{thread} died: {type(exc).__name__}: {exc}; restart in {delay:.1f} s",
        )
        threading.Thread(target=self.errors.publish, args=([msg],), daemon=True).start()

    def _ring_event(self, kind: str, info: dict[str, str]) -> None:
        """The ring's disk fault began or ended: one event on every source's error topic.

        The fault is a store's, or the ring's own disk probe's. At its end the files held for
        the ring are taken again. Lost windows are counted by the processor, not here.
        """
        self.errors.disk_event(kind, info, count=False)
        if kind == "retention_disk_ok":
            self.retry.retention_recovered()

    def _window_lost(self, window: Window) -> None:
        """A window whose handling raised (its worker died): its budget comes back.

        Its files are taken again after ``RETRY_BACKOFF_S``.
        """
        self.budget.release(window.take_charge())
        src = self.sources.get(window.source)
        for it in window.items:
            if it.path is not None and src is not None:
                src.retry(it.path, RETRY_BACKOFF_S)

    def degraded(self) -> dict[str, str]:
        """Parts not fully working now, part -> why (``/healthz``, the health message)."""
        out = degraded_parts(self.output)
        ring = self.retention
        if ring is not None and ring.degraded:
            out["retention"] = ring.degraded
        if self.lifecycle.faults.degraded:
            out["quarantine"] = self.lifecycle.faults.degraded
        for name, src in self.sources.items():
            why = getattr(src, "degraded", None)
            if why:
                out[f"source {name}"] = why
        out.update(self.failing.degraded(set(self.sources)))
        return out

    def _page(self, healthz: dict[str, Any]) -> str:
        """The status page (``health.status_page``) from the board and ``/healthz``."""
        assert self.view is not None
        return render_page(self.view.snapshot(), healthz, self.view.thumbnail, __version__)

    def _busy(self, queued: int, inflight: int) -> None:
        self.metrics.queue_depth.labels(queue="windows").set(queued)
        self.metrics.queue_bytes.labels(queue="inflight").set(self.budget.used)
        self.watchdog.set_busy(inflight)

    # -- start / stop ----------------------------------------------------------------------
    def start(self, runners: dict[str, ModelRunner] | None = None) -> None:
        """Start in named steps, each timed in the ready log line; then READY=1.

        The steps: lock the state folder, the health endpoint, the models (loaded and warmed
        up, unless ``runners`` are given already loaded), the decoders, the retention ring,
        the output, the pipeline and the sources.
        """
        clock = StartupClock()
        self.init_state_lock()
        self.start_health_endpoint()
        clock.mark("health endpoint")
        self.init_models(runners)
        clock.mark("models", ", ".join(sorted(self.runners)))
        clock.mark("decoders", self.init_decoders())
        if self.init_retention():
            clock.mark("retention")
        if not self._output_started:
            self.output.start()
            self._output_started = True
        if self.cfg.mqtt is not None:
            announce(self.cfg, mqtt_leaves(self.output))
        clock.mark("output")
        self.start_pipeline()
        self.start_sources()
        clock.mark("sources")
        self.announce_ready(clock)

    def init_state_lock(self) -> None:
        """One agent per state folder (``StateInUse``: exit 2); taken when the agent is made."""
        if self._state is None:
            assert self.cfg.state_dir is not None
            self._state = StateLock(self.cfg.state_dir)

    def close_state_lock(self) -> None:
        """Let the state folder go (:meth:`stop` does)."""
        if self._state is not None:
            self._state.close()
            self._state = None

    def start_health_endpoint(self) -> None:
        """The systemd watchdog, ``/metrics`` + ``/healthz`` and the status page.

        Where systemd armed a watchdog, ``WATCHDOG=1`` pings go while the pipeline makes
        progress (``health.watchdog``, the default) or, with it off, while the process lives;
        READY/STOPPING are sent either way.
        """
        cfg = self.cfg
        # off, pings go on while the process lives: a unit's armed WatchdogSec= would kill it
        self.watchdog.judge_progress = cfg.health.watchdog
        self.watchdog.start()
        where = (cfg.health.metrics_host, cfg.health.metrics_port)
        if self._server is not None and (cfg.health.metrics_port is None or where != self._at):
            self._server.close()  # a reload moved the endpoint or turned it off
            self._server = None
        if cfg.health.metrics_port is not None and self._server is None:
            self._server = self.metrics.serve(
                cfg.health.metrics_host,
                cfg.health.metrics_port,
                watchdog=self.watchdog,
                degraded=self.degraded,
            )
            self._at = where
        if self._server is not None:  # a reload may have turned the page on or off
            self._server.page = self._page if self.view is not None else None

    def init_models(self, runners: dict[str, ModelRunner] | None = None) -> None:
        """Load and warm up the models (or take ``runners``) and check they fit their sources.

        A model that does not fit is exit 2. The budget is charged what their windows hold.
        """
        try:
            self.runners = runners if runners is not None else load_models(self.cfg)
        except ModelUnusable as exc:  # a configuration problem, as validate says (exit 2)
            field = f"models.{exc.key}.path" if exc.key else "models"
            label = str(self.config_path or "<config>")
            raise ConfigError(label, [(field, f"cannot be loaded: {exc}")]) from exc
        check_models(self.cfg, self.runners, str(self.config_path or "<config>"))
        for warning in (unscored_warning(self.cfg), no_sources_warning(self.cfg)):
            if warning is not None:
                log.warning("%s", warning)
        window_charges(self.budget, self.runners)

    def init_decoders(self) -> str:
        """BLAS on one thread and the sources' decoders warmed up; what was done, for the log."""
        log.info("%s", limit_blas_threads())
        return warm_up_decoders((sc.modality for sc in self.cfg.sources), self.runners)

    def init_retention(self) -> bool:
        """Open the retention ring when one is configured; whether one is."""
        if self.cfg.retention is None:
            return False
        from cdml_edge.store.ondisk import RetentionError
        from cdml_edge.store.retention import RetentionRing

        try:
            self.retention = RetentionRing.from_config(
                self.cfg.retention, on_event=self._ring_event
            )
        except OSError as exc:  # its folder cannot be made or opened: the configuration's
            where = exc.filename or self.cfg.retention.dir
            why = f"the retention folder cannot be used: {exc.strerror}"
            raise RetentionError(where, why) from exc
        return True

    def start_pipeline(self) -> None:
        """The pipeline workers, then the windowers that feed them."""
        self._proc = self._processor()
        self.pipeline.start(self._proc.handle, self.workers)
        for w in self.windowers.values():
            w.start()

    def start_sources(self) -> None:
        """The sources, last: from now on files are taken."""
        for s in self.sources.values():
            s.start()

    def announce_ready(self, clock: StartupClock) -> None:
        """The health loop, ``online`` on the status topic and READY=1 to systemd.

        The sources are armed by now: online means ready.
        """
        self.health.start(self._stop, self.supervisor.spawn)
        self.health.publish_status("online")
        self.notifier.ready(
            f"running {counted(len(self.sources), 'source')}, {counted(len(self.runners), 'model')}"
        )
        log.info(
            "agent ready: %d sources, models %s; %s",
            len(self.sources),
            sorted(self.runners),
            clock.summary(),
        )

    def drain(self, timeout: float | None = None) -> bool:
        """Stop intake, close open windows and wait for windows in flight; ``True`` if all."""
        for s in self.sources.values():
            s.stop()
        for w in self.windowers.values():
            w.stop()
        return self.pipeline.drain(
            self.drain_timeout if timeout is None else timeout, self._give_up_held
        )

    def _give_up_held(self, inflight: int) -> None:
        """The drain's windows in flight are all held by a tee for a failing part: give up.

        Their files stay for the next run (or the sources' next scan after a reload);
        otherwise the drain would wait its whole timeout for a part that keeps failing.
        """
        if held_windows(self.output) >= inflight:
            if self._proc is not None:
                self._proc.abandoning = True
            give_up_held(self.output)

    def stop(self, timeout: float | None = None) -> bool:
        """Drain, publish ``offline``, stop the output and health; ``True`` if fully drained."""
        self.notifier.stopping()
        drained = self.drain(timeout)
        self._stop.set()
        self.health.publish_health()
        self.health.log_summary(final=True)
        self.health.publish_status("offline")
        self._stop_output()
        if self.retention is not None:
            self.retention.close()
        self.lifecycle.close()
        self.watchdog.stop()
        if self._server is not None:
            self._server.close()
            self._server = None
        self.supervisor.close()
        self.close_state_lock()
        return drained

    def reload(self) -> bool:
        """Re-read the config; apply it if it validates, else keep the running one."""
        if self.config_path is None:
            log.warning("reload: no config file to read")
            self.metrics.reload_refused()
            return False
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload refused, keeping the running configuration:\n%s", exc)
            self.metrics.reload_refused()
            return False
        moved = not _same_folder(new.state_dir, self.cfg.state_dir)
        state: StateLock | None = None
        try:  # before anything stops: a config naming an unloadable model changes nothing
            check_files(new, str(self.config_path))
            state = StateLock(new.state_dir) if moved and new.state_dir else None
            runners = load_models(new)
            check_models(new, runners, str(self.config_path))
        except Exception as exc:
            if state is not None:
                state.close()
            log.error("reload refused: %s (keeping the running configuration)", exc)
            self.metrics.reload_refused()
            return False
        self.notifier.reloading()
        log.info("reloading %s", self.config_path)
        kept = self._quiesce(keep_output=self._keeps_output(new))
        old_cfg, old_runners, old_state = self.cfg, self.runners, self._state
        if state is not None:
            self._state = state  # the old folder's lock is kept until the new one runs
        try:
            self._build(new, keep_output=kept)
            self.start(runners)
        except Exception as exc:  # what the checks could not foresee: go back, keep running
            log.error(
                "reload failed while applying it, back to the running configuration: %s: %s",
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            self.metrics.reload_refused()
            self._quiesce()
            if state is not None:
                state.close()
                self._state = old_state
            self._build(old_cfg)
            self.start(old_runners)
            return False
        if state is not None and old_state is not None:
            old_state.close()
        self.metrics.reload_taken()
        return True

    def _quiesce(self, keep_output: bool = False) -> bool:
        """Drain and stop what a configuration runs, for a reload to build anew.

        With ``keep_output`` the output goes on running if the drain settled every window
        (no callback of the old pipeline left to fire): ``True`` when it was kept.
        """
        kept = self.drain() and keep_output
        if not kept:
            self._stop_output()
        if self.retention is not None:
            self.retention.close()
        self.lifecycle.close()  # files still waiting for quarantine stay in their folder
        return kept

    def _stop_output(self) -> None:
        if self._proc is not None:  # what a tee gives up as it stops: taken again next start
            self._proc.abandoning = True
        self.output.stop(timeout=5.0)
        self._output_started = False

    def _keeps_output(self, new: AppConfig) -> bool:
        """A reload to ``new`` may keep the running output: all it is made from is the same.

        Not an output given to the agent (a test's), which the agent does not make.
        """
        return self._fixed_output is None and output_settings(new) == output_settings(self.cfg)

    def run(self, duration: float | None = None, install_signals: bool = True) -> int:
        """Start, serve until ``duration`` or SIGTERM/SIGINT, stop; the exit code.

        The signal handlers it installs are put back as they were when it returns or raises.
        """
        previous = self._install_signals() if install_signals else {}
        try:
            self.start()
            end = None if duration is None else time.monotonic() + duration
            while not self._stop.is_set():
                wait = 0.5 if end is None else max(0.0, min(0.5, end - time.monotonic()))
                if self._reload.wait(wait):
                    self._quiet_signals()
                    self.reload()
                if end is not None and time.monotonic() >= end:
                    break
            self.stop()  # windows in flight after the deadline stay on disk: retaken next run
            return 0
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _quiet_signals(self) -> None:
        """Wait until SIGHUPs stop coming, so that a burst of them is one reload.

        :data:`RELOAD_QUIET_S` without one, or :data:`RELOAD_QUIET_MAX_S` in all.
        """
        end = time.monotonic() + RELOAD_QUIET_MAX_S
        while True:
            self._reload.clear()
            if not self._reload.wait(min(RELOAD_QUIET_S, max(0.0, end - time.monotonic()))):
                return
            if time.monotonic() >= end:
                self._reload.clear()
                return

    def _install_signals(self) -> dict[int, Any]:
        """SIGTERM/SIGINT drain and stop, SIGHUP reloads; the handlers they replace."""

        def on_term(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: draining", signum)
            self._stop.set()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self._reload.set()

        handlers = {signal.SIGTERM: on_term, signal.SIGINT: on_term, signal.SIGHUP: on_hup}
        previous = {int(sig): signal.getsignal(sig) for sig in handlers}
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        return previous


def output_settings(cfg: AppConfig) -> tuple[Any, ...]:
    """What :func:`make_output` makes an output from; equal settings, the same output.

    Sparkplug B births a device per source and keeps ``bdSeq`` in the state folder, so with
    it the source names and the state folder count too.
    """
    settings: tuple[Any, ...] = (cfg.mqtt, cfg.spool, cfg.outbox, cfg.output, cfg.device.id)
    if cfg.mqtt is not None and cfg.mqtt.format == "sparkplug_b":
        settings += (tuple(s.name for s in cfg.sources), cfg.state_dir)
    return settings


RELOAD_QUIET_S = 0.3
"""A reload starts once no SIGHUP came for this long: a burst (an editor's saves, a script
sending one per file) drains and reloads once; each reload pauses intake."""
RELOAD_QUIET_MAX_S = 3.0


def _same_folder(a: Path | None, b: Path | None) -> bool:
    """Whether ``a`` and ``b`` name one folder (through links or ``..`` too)."""
    if a is None or b is None:
        return a == b
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare the names resolved
        return a.resolve() == b.resolve()


def run_agent(config_path: str | Path, duration: float | None = None) -> int:
    """Load the config and run the agent (the ``cdml-edge run`` command)."""
    cfg = load_config(config_path)
    return Agent(cfg, config_path).run(duration)
