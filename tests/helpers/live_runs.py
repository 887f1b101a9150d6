"""The live API's tests' runner: real files dropped, waits with a deadline, a watch in a process.

Files are dropped as a camera writes them, and a program using the live API runs in a Python
process of its own (for Ctrl-C and its exit).

Used by ``tests/live/test_api.py``, ``test_hostile_callbacks.py`` and ``test_stop_bounded.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def until(cond: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``cond`` every 50 ms until it holds; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.05)


def drop(folder: Path, name: str, data: bytes) -> Path:
    """Write like a camera does: a temporary name, then a rename (ignored until renamed)."""
    tmp = folder / f"{name}.part"
    tmp.write_bytes(data)
    os.replace(tmp, folder / name)
    return folder / name


def run_watch(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a program using the live API) to its end; its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


class WatchProcess:
    """``code`` running in a Python process of its own, its stdout and stderr piped.

    Read its lines with :meth:`line`, Ctrl-C it with :meth:`interrupt`; leaving the ``with``
    block kills it if it still runs.
    """

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        """The next line of its stdout, stripped."""
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def interrupt(self, timeout: float) -> tuple[str, str]:
        """SIGINT (one Ctrl-C); then its stdout and stderr once it ended within ``timeout``."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.communicate(timeout=timeout)

    @property
    def returncode(self) -> int | None:
        """Its exit status, once it ended."""
        return self.proc.returncode

    def __enter__(self) -> WatchProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
