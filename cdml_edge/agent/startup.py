"""Start-up: step times, the time to READY, and the BLAS thread limit of the appliance.

The time each step takes goes in the log, as does the time from process start to READY.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), ``None`` where unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime "))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    started = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    return max(0.0, time.time() - started)


def limit_blas_threads(threads: int = 1) -> str:
    """Run NumPy's and SciPy's BLAS on ``threads`` threads; a line for the start-up log.

    OpenBLAS starts one thread per core and lets them busy-wait after every call: decoding
    one audio clip (the mel filter bank is a matrix product) measured 33 ms of CPU at
    10 clips/s with two threads, 4 ms with one. The pipeline threads already give the
    parallelism. Libraries loaded now are limited through threadpoolctl, those loaded later
    (SciPy's) by ``OPENBLAS_NUM_THREADS``.
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    threadpool_limits(limits=threads, user_api="blas")
    libs = sorted({p["internal_api"] for p in threadpool_info() if p["user_api"] == "blas"})
    return f"BLAS ({', '.join(libs) or 'none loaded yet'}) on {threads} thread(s)"


class StartupClock:
    """Marks the end of each start-up step: one log line per step, one summary at READY."""

    def __init__(self) -> None:
        self._t0 = self._last = time.perf_counter()
        self.steps: list[tuple[str, float]] = []

    def mark(self, step: str, detail: str = "") -> float:
        """``step`` ended now: log and keep its duration (seconds since the previous mark)."""
        now = time.perf_counter()
        took, self._last = now - self._last, now
        self.steps.append((step, took))
        log.info("start-up: %s in %.0f ms%s", step, took * 1000, f" ({detail})" if detail else "")
        return took

    def summary(self) -> str:
        """``"2.1 s since the process started (models 61 ms, decoders 1.5 s, ...)"``."""
        age = process_age()
        total = time.perf_counter() - self._t0
        head = f"{age:.1f} s since the process started, " if age is not None else ""
        parts = ", ".join(f"{name} {_ms(s)}" for name, s in self.steps)
        return f"{head}{_ms(total)} in start() ({parts})"


def _ms(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"
