"""A folder readable again is an event on ``{source}/error``, not one more error.

The end of an unreadable-folder state went through the error sink like a failure:
``errors{stage="folder_readable"}`` and the live API's ``input_errors`` counted it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from cdml_edge.agent.error_events import ErrorReporter
from cdml_edge.health import Metrics
from cdml_edge.intake import FolderReadable, FolderUnreadable
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.windower import WindowPolicy
from cdml_edge.live.settings import WatchSettings
from cdml_edge.live.watch import LiveWatch
from cdml_edge.window.topics import Sequencer


class _Events:
    """Keeps what is published (a unit test of the reporter's own counting)."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def publish_batch(self, msgs: Any, on_durable: Any = None, on_given_up: Any = None) -> None:
        self.messages.extend(msgs)


def _errors(m: Metrics, stage: str) -> float:
    line = f'cdml_edge_errors_total{{stage="{stage}"}} '
    text = generate_latest(m.registry).decode().splitlines()
    return next((float(x[len(line) :]) for x in text if x.startswith(line)), 0.0)


def test_readable_again_is_published_and_not_counted_as_an_error(tmp_path: Path) -> None:
    out, m = _Events(), Metrics()
    rep = ErrorReporter(out, "d", Sequencer(), m, FileLifecycle(tmp_path / "q", 10**6), ["in"])
    rep.source_error("in", None, FolderUnreadable(tmp_path / "in", "Permission denied"), None)
    rep.source_error("in", None, FolderReadable(tmp_path / "in"), None)
    assert [msg.topic.rsplit("/", 1)[-1] for msg in out.messages] == ["error", "error"]
    assert b"FolderReadable" in out.messages[1].payload
    assert _errors(m, "folder_unreadable") == 1
    assert _errors(m, "folder_readable") == 0


def test_the_live_api_does_not_count_it_as_an_input_error(tmp_path: Path) -> None:
    w = LiveWatch(WatchSettings(tmp_path, WindowPolicy()), lambda window: None)
    w._input_error("live", None, FolderUnreadable(tmp_path, "Permission denied"), None)
    w._input_error("live", None, FolderReadable(tmp_path), None)
    assert w.stats.input_errors == 1
    assert any("can be read again" in e for e in w.stats.errors)  # still said
