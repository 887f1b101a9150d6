"""``stop()`` that times out while the worker finishes a batch whose callback returned.

The callback had returned in time, so that batch's files are finished as usual (deleted
under ``auto_delete``); the warning said the callback was still running and its files
"stay on disk, never deleted" while they were being deleted.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from helpers.live_runs import drop, until

from cdml_edge import watch_in_memory


def test_the_warning_says_the_batch_is_being_finished_not_abandoned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen = threading.Event()
    watch = watch_in_memory(
        tmp_path, lambda path, kind: seen.set(), background=True, auto_delete=True
    )
    finishing, release = threading.Event(), threading.Event()
    finish = watch._finish

    def slow_finish(window, delete):  # type: ignore[no-untyped-def]
        finishing.set()
        release.wait(60)  # a slow disk under the deletes
        finish(window, delete)

    watch._finish = slow_finish  # type: ignore[method-assign]
    try:
        drop(tmp_path, "a.txt", b"one")
        until(finishing.is_set)
        with caplog.at_level(logging.WARNING, logger="cdml_edge.live"):
            watch.stop(timeout=0.2)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warned and not any("still running" in m for m in warned), warned
        assert any("finishing" in m for m in warned), warned
    finally:
        release.set()
    until(lambda: not watch._worker.is_alive())
    assert seen.is_set() and not (tmp_path / "a.txt").exists()  # finished as usual: deleted
    assert watch.stats.abandoned == 0
