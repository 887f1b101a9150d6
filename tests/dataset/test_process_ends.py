"""Processes watched until they end: one thread asleep on their process descriptors."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from cdml_edge.data.process_ends import ProcessEnds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd: Linux")


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_each_end_is_told_once_with_its_key() -> None:
    told: list[str] = []
    seen = threading.Event()

    def on_end(key: str) -> None:
        told.append(key)
        seen.set()

    ends: ProcessEnds[str] = ProcessEnds(on_end, "test-ends")
    a, b = _sleeper(), _sleeper()
    assert ends.watch("a", a.pid) == "watching" and ends.watch("b", b.pid) == "watching"
    b.kill()
    b.wait()
    assert seen.wait(10) and told == ["b"]
    seen.clear()
    a.kill()
    a.wait()
    assert seen.wait(10) and told == ["b", "a"]


def test_a_process_that_ended_already_is_said_to_have_ended() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: no such process any more
    ends: ProcessEnds[int] = ProcessEnds(lambda key: None, "test-ends")
    assert ends.watch(1, gone.pid) == "ended"


def test_a_failing_handler_does_not_stop_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    told: list[int] = []
    seen = threading.Event()

    def on_end(key: int) -> None:
        told.append(key)
        seen.set()
        if key == 1:
            raise RuntimeError("handler failed")

    ends: ProcessEnds[int] = ProcessEnds(on_end, "test-ends")
    first, second = _sleeper(), _sleeper()
    ends.watch(1, first.pid)
    first.kill()
    first.wait()
    assert seen.wait(10)
    seen.clear()
    ends.watch(2, second.pid)
    second.kill()
    second.wait()
    assert seen.wait(10) and told == [1, 2]
    assert "handling the end of 1 failed" in caplog.text
