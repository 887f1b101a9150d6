"""A window the output refused: its files come back with a backoff, never quarantined for it.

An output that keeps failing (a full disk under ``output.jsonl``) costs a retry of each file
after 1 s, 2 s, 4 s ... at most every 30 s, not a rescore of every file each second; a file
delivered starts again at 1 s. The refusal is the output's fault, not the file's: no attempt
counts toward the quarantine after 3 failed windows.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cdml_edge.agent.retry import (
    OUTPUT_PAUSE_MAX_S,
    OUTPUT_PAUSE_S,
    WINDOW_ATTEMPTS,
    Attempts,
    WindowRetryPolicy,
)


class _Source:
    def __init__(self) -> None:
        self.retries: list[tuple[str, float]] = []

    def retry(self, path: Path, delay: float) -> None:
        self.retries.append((path.name, delay))

    def pause(self, paused: bool) -> None:
        pass


class _NoQuarantine:
    def quarantine(self, *args: Any) -> None:
        raise AssertionError("an output refusal quarantined a file")


def _policy(src: _Source, attempts: Attempts) -> WindowRetryPolicy:
    stopped = threading.Event()
    stopped.set()  # no intake resume timers left behind
    return WindowRetryPolicy(
        {"cam": src},  # type: ignore[dict-item]
        _NoQuarantine(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        attempts,
        stopped,
    )


def _window(*names: str) -> Any:
    items = [SimpleNamespace(path=Path("/in") / n, item_id=f"id-{n}", name=n) for n in names]
    return SimpleNamespace(source="cam", items=items)


def test_a_refused_file_waits_longer_each_time_and_is_never_quarantined() -> None:
    src, attempts = _Source(), Attempts()
    policy = _policy(src, attempts)
    for _ in range(8):
        policy.output_failed(_window("a.jpg"))
    delays = [d for _, d in src.retries]
    assert delays[0] == OUTPUT_PAUSE_S
    assert delays == sorted(delays) and delays[1] == 2 * delays[0]
    assert max(delays) == OUTPUT_PAUSE_MAX_S == delays[-1]
    assert sum(delays) >= 60  # 8 refusals: a minute of waiting, not 8 s
    assert attempts.fail("id-a.jpg") == 1  # no attempt was counted by the refusals
    assert len(delays) > WINDOW_ATTEMPTS  # refused more often than the quarantine allows


def test_a_delivered_file_starts_again_and_others_keep_their_own_count() -> None:
    src, attempts = _Source(), Attempts()
    policy = _policy(src, attempts)
    for _ in range(3):
        policy.output_failed(_window("a.jpg"))
    policy.output_failed(_window("a.jpg", "b.jpg"))
    assert src.retries[-2:] == [("a.jpg", 8 * OUTPUT_PAUSE_S), ("b.jpg", OUTPUT_PAUSE_S)]
    policy.delivered(["id-a.jpg"])
    src.retries.clear()
    policy.output_failed(_window("a.jpg", "b.jpg"))
    assert src.retries == [("a.jpg", OUTPUT_PAUSE_S), ("b.jpg", 2 * OUTPUT_PAUSE_S)]


def test_the_items_remembered_for_a_retry_stay_bounded() -> None:
    """The counts of items that are never scored again do not pile up.

    A file that failed once and then went away (deleted, or changed: a new id).
    """
    from cdml_edge.agent.retry import OUTPUT_REFUSED_MAX, OutputRefusals

    attempts, refusals = Attempts(), OutputRefusals()
    for i in range(3 * OUTPUT_REFUSED_MAX):
        attempts.fail(f"gone-{i}")
        refusals.delay(f"gone-{i}")
    assert f"gone-{3 * OUTPUT_REFUSED_MAX - 1}" in attempts  # the newest are kept
    assert len(attempts._counts) <= OUTPUT_REFUSED_MAX
    assert len(refusals._counts) <= OUTPUT_REFUSED_MAX
