"""A tee gives up the windows it holds for a part that keeps failing, instead of keeping them.

A window one part refused after another took it is held for that part: in flight for its
caller until the part takes it. With a part that keeps failing, nothing settled it, ever: an
agent's drain (its stop, a config reload) waited out its whole timeout for it. The tee's
``give_up_held`` (and its ``stop``) gives each held window a last try, then gives it up:
``on_given_up``, never ``on_durable``, once; its files stay for the next run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from cdml_edge.outputs.tee import TeeOutput
from cdml_edge.window.topics import OutMessage


class _Part:
    """An output that takes every batch (``failing``: refuses every batch, ENOSPC)."""

    def __init__(self, failing: bool = False) -> None:
        self.failing = failing
        self.took = 0
        self.stopped = False

    def start(self) -> None:
        pass

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        self.took += 1
        if on_durable is not None:
            on_durable()

    def stats(self) -> dict[str, int]:
        return {}

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped = True


def _held_tee() -> tuple[TeeOutput, _Part, list[str]]:
    """A tee holding one window for its failing part; what the window's callbacks said."""
    good, failing = _Part(), _Part(failing=True)
    parts: Any = [good, failing]
    tee = TeeOutput(parts, retry_s=30, retry_max_s=30)  # no timer retry during the test
    said: list[str] = []
    tee.publish_batch([], lambda: said.append("durable"), lambda: said.append("given up"))
    assert tee.held == 1 and said == []
    return tee, failing, said


def test_stop_gives_up_a_window_held_for_a_failing_part() -> None:
    tee, failing, said = _held_tee()
    tee.stop()
    assert said == ["given up"]  # settled: nothing waits for it; not durable
    assert tee.held == 0 and failing.stopped


def test_give_up_held_settles_held_windows_and_the_tee_goes_on() -> None:
    from cdml_edge.outputs.factory import give_up_held

    tee, failing, said = _held_tee()
    outer: Any = TeeOutput([tee])  # found inside another tee too
    assert give_up_held(outer) == 1
    assert said == ["given up"] and tee.held == 0
    failing.failing = False  # the part works again: new windows go to both
    tee.publish_batch([], lambda: said.append("durable"), lambda: said.append("given up"))
    assert said == ["given up", "durable"]
    tee.stop()


def test_a_last_try_that_the_part_takes_makes_the_window_durable() -> None:
    tee, failing, said = _held_tee()
    failing.failing = False
    assert tee.give_up_held() == 0
    assert said == ["durable"] and failing.took == 1
    tee.stop()


def test_a_window_given_up_while_its_retry_is_under_way_settles_once() -> None:
    tee, failing, said = _held_tee()
    entered, release = threading.Event(), threading.Event()
    refuse = failing.publish_batch

    def slow(
        messages: Sequence[OutMessage], on_durable: Any = None, on_given_up: Any = None
    ) -> None:
        entered.set()
        release.wait(10)
        failing.failing = False
        refuse(messages, on_durable, on_given_up)  # the part takes it, late

    failing.publish_batch = slow  # type: ignore[method-assign]
    retry = threading.Thread(target=tee.retry_held)
    retry.start()
    assert entered.wait(10)
    assert tee.give_up_held() == 1  # the retry under way is not waited for
    release.set()
    retry.join(10)
    assert said == ["given up"], said  # the late take settles nothing more
    assert tee.held == 0
    tee.stop()


def test_every_held_window_is_given_up_once(n: int = 3) -> None:
    good, failing = _Part(), _Part(failing=True)
    parts: Any = [good, failing]
    tee = TeeOutput(parts, retry_s=30, retry_max_s=30)
    said: list[int] = []
    tee.publish_batch([], None, lambda: said.append(0))
    for i in range(1, n):  # refused as a whole while a part holds: not held again
        with pytest.raises(OSError):
            tee.publish_batch([], None, lambda i=i: said.append(i))  # type: ignore[misc]
    tee.stop()
    tee.stop()
    assert said == [0]


def test_a_window_held_for_two_failing_parts_is_one_window() -> None:
    """A drain compares the held windows with those in flight: each counts once."""
    from cdml_edge.outputs.factory import held_windows

    parts: Any = [_Part(), _Part(failing=True), _Part(failing=True)]
    tee = TeeOutput(parts, retry_s=30, retry_max_s=30)
    tee.publish_batch([], lambda: None, lambda: None)
    assert tee.held == 2  # each part's
    assert held_windows(tee) == 1
    tee.stop()
