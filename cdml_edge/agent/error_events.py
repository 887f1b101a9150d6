"""Events: what the agent reports when an input or a window fails, or a camera changes state.

Failures go on ``{source}/error``, camera state changes on ``{source}/camera``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from cdml_edge.health import Metrics
from cdml_edge.intake.camera.status import CameraTransition
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.outputs.base import Output
from cdml_edge.window.payloads import CameraEvent
from cdml_edge.window.score import error_event
from cdml_edge.window.topics import OutMessage, Sequencer, relative_topic

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
        sources: Sequence[str] = (),
    ) -> None:
        self.output = output
        self.sources = list(sources)
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
            source,
            item,
            error_type,
            message,
            device=self.device,
            sequencer=self.sequencer,
            quarantined_path=str(quarantined) if quarantined else None,
        )

    def publish(self, msgs: Sequence[OutMessage]) -> None:
        """Publish events outside a window's batch; a refusal is logged, not raised."""
        try:
            self.output.publish_batch(msgs)
        except Exception:
            log.exception("could not publish %d error events", len(msgs))

    def disk_event(self, kind: str, info: dict[str, str], *, count: bool = True) -> None:
        """A store's disk fault began or ended: one event on every source's error topic.

        Every source's, as the fault is the device's, not one input's. A start
        (``*_disk_full``, ``*_io_error``) is counted in ``errors{stage=kind}`` unless
        ``count`` is False; an end is ``*_disk_ok``.
        """
        if count and not kind.endswith("_disk_ok"):
            self.metrics.errors.labels(stage=kind).inc()
        where = info.get("dir", "")
        message = f"{where}: {info['op']}: {info['error']}" if "error" in info else f"{where}: ok"
        self.publish([self.event(s, None, kind, message) for s in self.sources])

    def source_error(
        self, source: str, name: str | None, exc: Exception, path: Path | None
    ) -> None:
        """The sources' error sink: counted under the error's stage and reported.

        Stages: ``read``, ``not_regular``, ``symlink``, ``intake``, ... With a ``path``, a
        file the error says to quarantine (too large for any window, failed to be taken) is;
        one it says to leave in place (a keep folder's) is counted as such.
        """
        if getattr(exc, "failure", True):  # the end of a state is reported, not counted
            self.metrics.errors.labels(stage=getattr(exc, "stage", "read")).inc()
        dest, message = None, str(exc)
        if getattr(exc, "quarantine", False) and path is not None and name is not None:
            dest, left = self.lifecycle.quarantine_or_leave(source, name, path, None)
            message += f"; {left}" if left else ""
        elif getattr(exc, "left_in_place", False):
            self.lifecycle.left_in_place += 1
        self.publish([self.event(source, name, type(exc).__name__, message, dest)])

    def quarantined_late(self, source: str, name: str, dest: Path) -> None:
        """A late quarantine: an event naming where the file now is.

        The file's quarantine had failed (a full disk); it was moved once it worked again.
        """
        self.publish(
            [
                self.event(
                    source,
                    name,
                    "QuarantinedLate",
                    "moved to quarantine once its disk worked again",
                    dest,
                )
            ]
        )

    def camera_change(self, change: CameraTransition) -> None:
        """A camera's state change, retained on ``{source}/camera``.

        The start of an outage counts once in ``errors{stage="camera"}``.
        """
        if change.state == "reconnecting" or (
            change.state == "failed" and change.previous == "connecting"
        ):
            self.metrics.errors.labels(stage="camera").inc()
        topic = relative_topic("camera", change.source)
        event = CameraEvent(
            source=change.source,
            state=change.state,
            previous=change.previous,
            reason=change.reason,
            down_for_s=None if change.down_for_s is None else round(change.down_for_s, 3),
            outages=change.outages,
            reconnects=change.reconnects,
            failed_attempts=change.failed_attempts,
            url=change.url,
            ts=change.ts,
            seq=self.sequencer.next(topic),
            device=self.device,
        )
        self.publish([OutMessage(topic, event.model_dump_json().encode(), retain=True)])
