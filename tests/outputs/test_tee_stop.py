"""A tee's stop waits for a retry of a held window under way before it stops its outputs.

A window one part refused after another took it is held for that part and given to it
again by a timer thread. ``stop()`` gave held windows a last try, but when the timer's
retry was under way that last try returned at once, and the outputs were stopped while the
retry was still publishing to one of them (its ``on_durable`` could then fire after the
agent's lifecycle was closed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from cdml_edge.outputs.tee import TeeOutput
from cdml_edge.window.topics import OutMessage


class _Part:
    def __init__(self, log: list[str], fail_first: bool = False) -> None:
        self.log, self.fail_first = log, fail_first
        self.calls = 0
        self.entered, self.release = threading.Event(), threading.Event()

    def start(self) -> None:
        pass

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        self.calls += 1
        if self.fail_first and self.calls == 1:
            raise OSError(28, "No space left on device")
        if self.fail_first:  # the timer's retry: held until the test lets it go
            self.entered.set()
            self.release.wait(10)
            self.log.append("retry published")
        if on_durable is not None:
            on_durable()

    def stats(self) -> dict[str, int]:
        return {}

    def stop(self, timeout: float = 5.0) -> None:
        self.log.append(f"stop {'failing' if self.fail_first else 'good'} part")


def test_stop_waits_for_a_retry_under_way() -> None:
    log: list[str] = []
    good, failing = _Part(log), _Part(log, fail_first=True)
    parts: Any = [good, failing]
    tee = TeeOutput(parts, retry_s=0.01, retry_max_s=0.01)
    durable = threading.Event()
    tee.publish_batch([], durable.set, None)  # the good part took it, the failing one held
    assert failing.entered.wait(10), "the timer did not retry the held window"
    stopper = threading.Thread(target=tee.stop)
    stopper.start()
    stopper.join(1.0)  # with the retry under way, stop must still be waiting here
    failing.release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    for _ in range(500):  # the timer's publish goes on after the release, whatever stop did
        if "retry published" in log:
            break
        threading.Event().wait(0.01)
    assert log.index("retry published") < log.index("stop failing part"), log
    assert durable.is_set()
