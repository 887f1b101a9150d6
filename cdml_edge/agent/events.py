"""Error events: what the agent reports on ``{source}/error`` when an input or a window fails."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from cdml_edge.agent.health import Metrics
from cdml_edge.agent.lifecycle import FileLifecycle
from cdml_edge.agent.outputs.base import Output
from cdml_edge.window.payloads import OutMessage, Sequencer
from cdml_edge.window.score import error_event

log = logging.getLogger(__name__)


class ErrorReporter:
    """Builds error events (device, sequence numbers) and publishes them; never raises."""

    def __init__(
        self,
        output: Output,
        device: str,
        sequencer: Sequencer,
        metrics: Metrics,
        lifecycle: FileLifecycle,
    ) -> None:
        self.output = output
        self.device = device
        self.sequencer = sequencer
        self.metrics = metrics
        self.lifecycle = lifecycle

    def event(
        self,
        source: str,
        item: str | None,
        error_type: str,
        message: str,
        quarantined: Path | None = None,
    ) -> OutMessage:
        """One error event; ``quarantined`` is where the bad input was moved, if anywhere."""
        return error_event(
            source, item, error_type, message,
            device=self.device, sequencer=self.sequencer,
            quarantined_path=str(quarantined) if quarantined else None,
        )

    def publish(self, msgs: Sequence[OutMessage]) -> None:
        """Publish events outside a window's batch; a refusal is logged, not raised."""
        try:
            self.output.publish_batch(msgs)
        except Exception:
            log.exception("could not publish %d error events", len(msgs))

    def source_error(
        self, source: str, name: str | None, exc: Exception, path: Path | None
    ) -> None:
        """The sources' error sink: counted under the error's stage (``read``,
        ``not_regular``, ``symlink``, ``intake``, ...) and reported; with a ``path``, a file
        the error says to quarantine (too large for any window, failed to be taken) is."""
        self.metrics.errors.labels(stage=getattr(exc, "stage", "read")).inc()
        dest = None
        if getattr(exc, "quarantine", False) and path is not None and name is not None:
            dest = self.lifecycle.quarantine(source, name, path, None)
        self.publish([self.event(source, name, type(exc).__name__, str(exc), dest)])
