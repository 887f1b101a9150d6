"""The timing every benchmark uses, so that a figure means the same in each of them.

A benchmark measures ours and a baseline in the same run and prints the ratio. The ways to
take a figure, from the one most used:

* :func:`interleaved` - the best wall and the best CPU time of each of several functions
  over ``repeat`` rounds; a round calls every function once in turn, so all of them see the
  same machine load (:func:`best_of` for one function, :func:`timed` for one call,
  :func:`clocked` for one call and what it returns);
* :func:`rounds` - the same interleaving for functions that measure themselves (a rate, a
  per-item figure): every result of each, for the caller to take the best of;
* :func:`median_time` - the median wall time of one call over a time budget (calls of
  microseconds to milliseconds, many of them, so the median is robust to the machine's noise);
* :func:`cpu_per_item` - CPU seconds per item of a function run for a time budget;
* :func:`each_item` and :func:`per_item` - CPU per item and the wall-time p50 / p99 of a
  function called on each item; :func:`percentile` for any list of times;
* :func:`cpu_seconds` and :func:`measure_tree` - CPU of other processes: a given set (a
  capture process), or this process and every process below it (Ray's workers);
* :func:`load_average` for the heading, :func:`ratio` for a ratio as the tables print it.

CPU time is ``time.process_time`` (all threads of this process) unless said otherwise; a
loaded machine disturbs it far less than wall time.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")
Item = TypeVar("Item")


class Timing(NamedTuple):
    """Seconds of wall time and of CPU time."""

    wall: float
    cpu: float


def clocked(fn: Callable[[], T], sync: Callable[[], object] | None = None) -> tuple[T, Timing]:
    """What one call of ``fn`` returns, and its wall and CPU seconds.

    ``sync`` (``torch.cuda.synchronize``, say) is called before the clocks start and before
    they stop, so work queued on a device counts.
    """
    if sync is not None:
        sync()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if sync is not None:
        sync()
    return out, Timing(time.perf_counter() - w0, time.process_time() - c0)


def timed(fn: Callable[[], object], sync: Callable[[], object] | None = None) -> Timing:
    """Wall and CPU seconds of one call of ``fn`` (see :func:`clocked`)."""
    return clocked(fn, sync)[1]


def rounds(fns: Mapping[str, Callable[[], T]], repeat: int) -> dict[str, list[T]]:
    """Every result of each function over ``repeat`` rounds.

    A round calls each one in turn, so all of them see the same machine load.
    """
    out: dict[str, list[T]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            out[k].append(fn())
    return out


def fastest(timings: Iterable[Timing]) -> Timing:
    """The best wall time and the best CPU time (of any of the runs; inf when none)."""
    ts = list(timings)
    return Timing(
        min((t.wall for t in ts), default=math.inf), min((t.cpu for t in ts), default=math.inf)
    )


def interleaved(fns: Mapping[str, Callable[[], object]], repeat: int) -> dict[str, Timing]:
    """The best wall and CPU seconds of each function over ``repeat`` interleaved rounds."""
    runs = rounds({k: functools.partial(timed, fn) for k, fn in fns.items()}, repeat)
    return {k: fastest(v) for k, v in runs.items()}


def best_of(fn: Callable[[], object], repeat: int) -> Timing:
    """The best wall and CPU seconds of ``repeat`` calls of ``fn``."""
    return interleaved({"fn": fn}, repeat)["fn"]


def median_time(
    fn: Callable[[], object], seconds: float, warmup: int = 3, min_runs: int = 10
) -> float:
    """Median wall seconds of one call.

    ``warmup`` calls untimed, then calls for ``seconds`` (at least ``min_runs`` of them). Wall
    time only: the CPU clock costs a system call, which would weigh on calls of a few
    microseconds.
    """
    for _ in range(warmup):
        fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < min_runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_per_item(fn: Callable[[], int], seconds: float, warmup: int = 3) -> float:
    """CPU seconds per item of ``fn``, which returns how many items one call did.

    ``warmup`` calls untimed, then calls for ``seconds`` of wall time.
    """
    for _ in range(warmup):
        fn()
    n, c0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds or n == 0:
        n += fn()
    return (time.process_time() - c0) / n


def each_item(fn: Callable[[Item], object], items: Iterable[Item]) -> tuple[float, list[float]]:
    """CPU seconds for ``fn`` over all ``items``, and the wall seconds of each call."""
    walls = []
    c0 = time.process_time()
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        walls.append(time.perf_counter() - t0)
    return time.process_time() - c0, walls


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``; nan for no values.

    Linear between the closest ranks (numpy's default).
    """
    s = sorted(values)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class PerItem(NamedTuple):
    """Seconds per item: CPU, and the wall time's median and 99th percentile."""

    cpu: float
    p50: float
    p99: float


def per_item(cpu: float, walls: Sequence[float], n: int) -> PerItem:
    """``cpu`` seconds spent on ``n`` items, with the wall time (or latency) of each."""
    return PerItem(cpu / n, percentile(walls, 50), percentile(walls, 99))


def cpu_seconds(procs: Iterable[Any]) -> float:
    """User + system CPU seconds of the given ``psutil.Process`` objects (gone ones: 0)."""
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


class TreeCpu:
    """CPU seconds of this process and every process below it while the block runs.

    Sampled every 50 ms so that children which exit before the end still count (up to the
    last sample before they exit).
    """

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, baseline: bool = False) -> None:
        import psutil

        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            used = cpu_seconds([p])
            self.first.setdefault(p.pid, used if baseline else 0.0)  # new: all of it counts
            self.last[p.pid] = max(used, self.last.get(p.pid, 0.0))

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def __enter__(self) -> TreeCpu:
        self._sample(baseline=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(self.last[p] - self.first[p] for p in self.last)


def measure_tree(fn: Callable[[], object]) -> Timing:
    """Wall seconds of one call, and the CPU seconds of this process and its descendants."""
    t0 = time.perf_counter()
    with TreeCpu() as meter:
        fn()
    return Timing(time.perf_counter() - t0, meter.seconds)


def load_average() -> float:
    """The 1-minute load average, for a benchmark's heading."""
    return os.getloadavg()[0]


def ratio(value: float, base: float, digits: int = 2) -> str:
    """``value / base`` as the tables print a ratio: ``1.23x``."""
    return f"{value / base:.{digits}f}x"
