"""Run a function in a forked child and read how it ended (a crash must not end the session)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable


def _run(fn: Callable[[], bool]) -> None:
    os._exit(0 if fn() else 1)


def in_a_child(fn: Callable[[], bool], timeout: float | None = None) -> int:
    """``fn()`` in a forked child: 0 when it returns True, 1 when False, -signal on a crash.

    A child still running after ``timeout`` seconds (a hang) is killed: ``-SIGKILL``.

    A multiprocessing child, not a bare ``os.fork``: multiprocessing's after-fork hooks run
    in it (its descriptor sharer among them), so ``torch.multiprocessing`` works there.
    An exception is 1 as well, its traceback on stderr.
    """
    child = multiprocessing.get_context("fork").Process(target=_run, args=(fn,))
    child.start()
    child.join(timeout)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode is not None
    return child.exitcode
