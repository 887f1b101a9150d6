"""A health message that cannot be written (a full disk under output.jsonl): one line.

Before, every ``health.interval`` logged ``could not publish health`` with a full Python
traceback (six in 40 s on a full disk); now one ERROR line without a traceback, debug lines
while it goes on failing, and ERROR again once it worked in between.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cdml_edge.agent.app import Agent
from cdml_edge.config import parse_config
from cdml_edge.window.topics import OutMessage


class _Disk:
    """An output on a disk that can be full."""

    def __init__(self) -> None:
        self.full = True
        self.sent: list[OutMessage] = []

    def start(self) -> None: ...

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.sent += messages
        if on_durable is not None:
            on_durable()

    def stats(self) -> dict[str, int]:
        return {}

    def stop(self, timeout: float = 5.0) -> None: ...


def test_a_health_message_on_a_full_disk_is_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = _Disk()
    agent = Agent(parse_config({"state_dir": str(tmp_path)}), output=disk)
    caplog.set_level(logging.DEBUG, logger="cdml_edge.health.reporter")
    for full in (True, True, True, False, True):
        disk.full = full
        agent.health.publish_health()
        time.sleep(0.01)
    agent.close_state_lock()
    failed = [r for r in caplog.records if "could not publish health" in r.getMessage()]
    assert [r.levelno for r in failed] == [
        logging.ERROR,
        logging.DEBUG,
        logging.DEBUG,
        logging.ERROR,
    ], [(r.levelname, r.getMessage()) for r in failed]
    assert all(r.exc_info is None for r in failed)
    assert "No space left on device" in failed[0].getMessage()
    assert [m.topic for m in disk.sent] == ["health"]
