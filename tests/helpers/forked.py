"""Run a function in a forked child and read how it ended (a crash must not end the session)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


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


_SCENARIO = (
    "import importlib.util, sys; sys.path.insert(0, sys.argv[1]); "
    "spec = importlib.util.spec_from_file_location('scenario', sys.argv[2]); "
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
    "sys.exit(0 if getattr(m, sys.argv[3])(*sys.argv[4:]) else 1)"
)


def in_a_fresh_interpreter(module: str, func: str, *args: str, timeout: float) -> int:
    """``func(*args)`` of the test module ``module`` in a new Python process.

    0 when it returns True, 1 when False or on an exception, -signal on a crash, -9 when it
    still runs after ``timeout`` seconds (killed). Nothing of this process is inherited:
    once a test worker has used torch's intra-op (OpenMP) thread pool, a forked child that
    runs torch operations hangs (GNU OpenMP is not fork-safe; DataLoader's own workers set
    one thread and are not affected), for reasons of the test run, not of the code under
    test.
    """
    tests = str(Path(__file__).resolve().parent.parent)
    cmd = [sys.executable, "-c", _SCENARIO, tests, module, func, *args]
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9
