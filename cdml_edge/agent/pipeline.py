"""The work done on one closed window, from packing it to finishing its source files.

pack -> score -> quarantine bad items -> retain -> output -> once durable, finish the
source files (``on_done``).

A window's budget bytes are released once it has been handed to the output (or has failed);
its files are deleted, moved or kept only when the output calls back that the results are
durable, so a crash before then leaves them on disk (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cdml_edge.agent.error_events import ErrorReporter
from cdml_edge.agent.failing import FailingSources
from cdml_edge.agent.retry import Attempts, WindowRetryPolicy
from cdml_edge.config import AppConfig, SourceConfig
from cdml_edge.errors import CdmlError
from cdml_edge.health import Metrics
from cdml_edge.health.board import ActivityBoard
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.factory import Source
from cdml_edge.intake.finishing import FileLifecycle, OnDone
from cdml_edge.intake.windower import PipelineGate
from cdml_edge.model.runner import ModelRunner
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.jsonl import StdoutClosed
from cdml_edge.store.retention import StoreStatus
from cdml_edge.window.configured import pack_and_score
from cdml_edge.window.items import FileIdentity, Window
from cdml_edge.window.score import WindowOutcome
from cdml_edge.window.topics import OutMessage

if TYPE_CHECKING:
    from cdml_edge.store.retention import RetentionRing

log = logging.getLogger(__name__)


class OutputFailed(CdmlError):
    """The output refused a window's messages (disk full, publisher closed).

    Not the files' fault: they stay on disk and are taken again with a backoff; their budget
    bytes are already released. Caused by :class:`~cdml_edge.outputs.jsonl.StdoutClosed`
    (stdout's reader went away), the agent stops instead: nothing would take them.
    """


@dataclass(frozen=True)
class _ScoredFiles:
    """A scored window's files: the versions to finish, and every file item's id."""

    files: list[tuple[Path, FileIdentity | None, str | None]]  # path, identity, SHA-256
    ids: list[str]  # failed items too: their attempts are over either way

    @classmethod
    def of(cls, window: Window, outcome: WindowOutcome) -> _ScoredFiles:
        failed = {f.item.id for f in outcome.failures}
        sha = {mi.id: mi.sha256 for mi in outcome.manifest.items}
        files = [
            (it.path, it.identity, sha.get(it.item_id))
            for it in window.items
            if it.path and it.item_id not in failed
        ]
        return cls(files, [it.item_id for it in window.items if it.path])


@dataclass
class WindowPipeline:
    """Processes windows with the running configuration, models and output.

    Thread-safe: every worker thread calls :meth:`handle`. ``done`` is called once per
    window, when it is durable or has failed.
    """

    cfg: AppConfig
    runners: Mapping[str, ModelRunner]
    output: Output
    budget: ByteBudget
    sources: Mapping[str, Source]
    lifecycle: FileLifecycle
    metrics: Metrics
    errors: ErrorReporter
    attempts: Attempts
    retry: WindowRetryPolicy
    done: Callable[[], None]
    retention: RetentionRing | None = None
    gate: PipelineGate | None = None
    view: ActivityBoard | None = None
    failing: FailingSources | None = None
    #: the drain gives up what a tee holds for a failing part: those files are taken again
    #: at the next start (held in memory), not recorded as never deliverable
    abandoning: bool = False

    def handle(self, window: Window) -> None:
        """Process ``window``; a failure goes to the retry policy and is never raised.

        Once it is scored (or failed) the ``gate`` learns that a worker is free.
        """
        try:
            self._handle(window)
        finally:
            if self.gate is not None:
                self.gate.leave()

    def _handle(self, window: Window) -> None:
        try:
            self.process(window)
        except OutputFailed as exc:
            self.metrics.errors.labels(stage="output").inc()
            if isinstance(exc.__cause__, StdoutClosed):  # for good: stop, files kept
                self.retry.output_closed(window)
            else:
                log.error(
                    "output failed for window %s, files kept for a retry: %s",
                    window.window_id,
                    exc,
                )
                self.retry.output_failed(window)
            self.done()
        except Exception as exc:
            log.exception("window %s failed", window.window_id)
            self.metrics.errors.labels(stage="pipeline").inc()
            if self.failing is not None:
                self.failing.observe(window.source, 0, len(window.items), _said(exc))
            self.errors.publish(
                [self.errors.event(window.source, None, type(exc).__name__, str(exc))]
            )
            self.retry.window_failed(window, exc)
            self.budget.release(window.take_charge())
            self.done()

    def process(self, window: Window) -> None:
        """Score ``window`` and hand its messages to the output; raises on a failure.

        :class:`OutputFailed` when the output refused them.
        """
        sc = next(s for s in self.cfg.sources if s.name == window.source)
        outcome, errors, unretained = self._score(window, sc)
        scored = _ScoredFiles.of(window, outcome)  # what either callback acts on
        arrivals = [(r.ts, r.anomaly) for r in outcome.results]
        on_durable = self._when_durable(window, sc, scored, arrivals, hold=unretained)
        on_given_up = self._when_given_up(window, scored)
        msgs = outcome.messages(self.cfg.results_mode()) + errors
        if self.view is not None:  # the status page's images: the bytes in memory, held
            self.view.keep_images(window)
        try:
            self.output.publish_batch(msgs, on_durable, on_given_up)
        except Exception as exc:
            # its files come again and are kept with their next window; camera frames (no
            # path) do not come again: the ring keeps their only copy
            if self.retention is not None and all(it.path is not None for it in window.items):
                self.retention.withdraw(outcome.manifest.window_id)
            raise OutputFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.budget.release(window.take_charge())  # the one release once this far

    def _score(
        self, window: Window, sc: SourceConfig
    ) -> tuple[WindowOutcome, list[OutMessage], bool]:
        """Pack, score, quarantine the bad items and retain the window.

        The outcome, the error events and whether the files must wait for the ring (it
        could not keep the window). The packed archive lives only here, not while the
        output works.
        """
        packed, outcome = pack_and_score(window, self.cfg, sc, self.runners, self.errors.sequencer)
        for model in {r.model for r in outcome.results}:
            if model != "none":
                self.metrics.inference_latency.labels(model=model).observe(
                    outcome.window.timings.infer_ms / 1000.0
                )
        errors = self._quarantine_failures(window, outcome, sc.on_done)
        if self.failing is not None:
            last = outcome.failures[-1] if outcome.failures else None
            said = f"{last.error_type}: {last.message}" if last is not None else None
            self.failing.observe(window.source, len(outcome.results), len(outcome.failures), said)
        unretained = self.retention is not None and self._retain(packed.archive, outcome)
        return outcome, errors, unretained

    def _quarantine_failures(
        self, window: Window, outcome: WindowOutcome, on_done: OnDone
    ) -> list[OutMessage]:
        """Quarantine (or leave, see ``bad_input``) each item not decoded; one event each.

        A file left in place is kept: not taken again unless it changes.
        """
        by_id = {it.item_id: it for it in window.items}
        errors: list[OutMessage] = []
        for f in outcome.failures:
            it = by_id[f.item.id]
            self.metrics.errors.labels(stage="decode").inc()
            dest, left = self.lifecycle.bad_input(
                window.source,
                it.name,
                it.path,
                None if it.path else it.data,
                on_done=on_done,
                error_type=f.error_type,
            )
            if dest is not None and it.path is None:
                self.metrics.bytes_written.labels(kind="quarantine").inc(len(it.data))
            if it.path is not None:
                self.sources[window.source].release(it.path, keep=left is not None)
            said = f"{f.message}; {left}" if left else f.message
            errors.append(self.errors.event(window.source, it.name, f.error_type, said, dest))
        return errors

    def _retain(self, archive: bytes, outcome: WindowOutcome) -> bool:
        """Keep the scored window in the retention ring; ``True`` when the files must wait.

        They wait for the ring when ``retention.required`` and the window was not written.
        The live path goes on. Its disk events, and taking held files again when the disk
        works again, are the agent's ring hook.
        """
        assert self.retention is not None and self.cfg.retention is not None
        res = self.retention.store(archive, outcome.manifest)
        if res.bytes_written:
            self.metrics.bytes_written.labels(kind="retention").inc(res.bytes_written)
        if res.lost or res.status is StoreStatus.TOO_LARGE:  # wanted by the policy, not kept
            self.metrics.errors.labels(stage=f"retention_{res.status.value}").inc()
        return res.lost and self.cfg.retention.required

    def _when_durable(
        self,
        window: Window,
        sc: SourceConfig,
        scored: _ScoredFiles,
        arrivals: Sequence[tuple[float, bool]],
        hold: bool = False,
    ) -> Callable[[], None]:
        """The ``on_durable`` callback: finish (or hold) the scored files, count, ``done``.

        Only the versions scored are finished (identity and the manifest's SHA-256); with
        ``hold`` they are kept until the ring writes again. Then the window, its results'
        latencies and anomalies (``arrivals``: each result's ``ts`` and flag) are counted,
        once: a window the output refused and scored again counts only when delivered. And
        ``done`` is called. Only paths and identities travel into it, not the window's bytes.
        """
        done_files, done_ids = scored.files, scored.ids
        closed_ts, source = window.closed_ts, window.source

        def on_durable() -> None:
            self.attempts.clear(done_ids)
            self.retry.delivered(done_ids)
            for p, ident, digest in done_files:
                if hold:
                    self.retry.hold_for_retention(source, p, self._ring_failing)
                    continue
                self.lifecycle.finish(p, sc.on_done, sc.move_to, identity=ident, sha256=digest)
                src = self.sources.get(source)
                if src is not None:
                    src.release(p, keep=sc.on_done == "keep")
            self.metrics.windows.labels(source=source).inc()
            # both ends on the wall clock (closed_ts is the manifest's): a step back must not
            # observe a negative latency, which takes _sum down (a counter reset to Prometheus)
            latency = max(0.0, time.time() - closed_ts)
            self.metrics.window_latency.labels(source=source).observe(latency)
            self._observe_arrival(source, arrivals)
            self.done()

        return on_durable

    def _when_given_up(self, window: Window, scored: _ScoredFiles) -> Callable[[], None]:
        """The ``on_given_up`` callback: the output can never deliver a message of the window.

        Retrying would make the same message again, so the scored files are left where they
        are and not taken again unless they change (as ``on_done: keep`` leaves them); the
        window is counted as an output error and ``done`` called, so nothing waits on it.
        Runs on the output's thread: it publishes nothing.
        """
        paths = [p for p, _ident, _sha in scored.files]
        ids = scored.ids
        source, window_id = window.source, window.window_id

        def on_given_up() -> None:
            self.attempts.clear(ids)
            self.retry.delivered(ids)
            src = self.sources.get(source)
            abandoned = self.abandoning  # at the drain: a part still refused it
            for p in paths:
                if src is not None and abandoned:
                    src.hold(p)  # not again in this run; the next start takes it again
                elif src is not None:
                    src.release(p, keep=True)
            self.metrics.errors.labels(stage="output_given_up").inc()
            log.error(
                "window %s: %s; its %d file(s) stay in the folder, %s",
                window_id,
                "given up at the drain while an output still refused it"
                if abandoned
                else "the output gave up on its messages (too large for the broker or the "
                "spool, see above)",
                len(paths),
                "taken again at the next start"
                if abandoned
                else "not taken again unless they change",
            )
            self.done()

        return on_given_up

    def _ring_failing(self) -> bool:
        return self.retention is not None and self.retention.degraded is not None

    def _observe_arrival(self, source: str, arrivals: Sequence[tuple[float, bool]]) -> None:
        """Each published result: its latency since the item's ``ts``, its anomaly flag."""
        now = time.time()
        for ts, anomaly in arrivals:
            self.metrics.item_latency.labels(source=source).observe(max(0.0, now - ts))
            if anomaly:
                self.metrics.anomalies.labels(source=source).inc()


def _said(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` of ``exc``, cut to ``limit`` characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
