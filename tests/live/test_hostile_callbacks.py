"""The live API embedded in a program that misbehaves: on real folders, with real files.

Callbacks that stop the watch from inside, that exit, that are slow while tiny files pour
in; options that cannot work refused at the call rather than batch after batch.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.live_runs import drop, run_watch, until

from cdml_edge import LiveBatchLoader, PackedBatch, watch_and_pack, watch_in_memory
from cdml_edge.intake.windower import WindowPolicy
from cdml_edge.live import LiveWatch, WatchSettings


def test_stop_called_from_inside_the_callback_ends_the_watch(tmp_path: Path) -> None:
    """``stop()`` in the callback joined the worker's own thread: RuntimeError, a failed batch."""
    inp = tmp_path / "in"
    inp.mkdir()
    holder: dict[str, LiveWatch] = {}
    returned: list[object] = []

    def on_batch(batch: PackedBatch) -> None:
        returned.append(holder["watch"].stop())  # "that was the one I wanted"

    holder["watch"] = watch = watch_and_pack(
        inp, None, on_batch, interval_seconds=0.2, auto_delete=True, background=True
    )
    try:
        drop(inp, "a.txt", b"one")
        until(lambda: not watch.running and not watch._worker.is_alive())
    finally:
        stats = watch.stop()
    assert len(returned) == 1 and stats.callback_errors == 0, stats.errors
    assert (stats.batches, stats.files, stats.deleted) == (1, 1, 1)
    assert list(inp.iterdir()) == []


def test_stop_called_from_inside_a_blocking_watch_returns_the_call(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    holder: dict[str, LiveWatch] = {}
    drop(inp, "a.txt", b"one")
    t0 = time.monotonic()

    def on_file(path: str, kind: str) -> None:
        while "watch" not in holder:  # set by the watch's start, below
            time.sleep(0.01)
        holder["watch"].stop()

    settings = WatchSettings(inp, WindowPolicy(1.0, 1, 1 << 20, close_when_idle=False))
    watch = LiveWatch(settings, lambda w: on_file(str(w.items[0].path), "text"))
    holder["watch"] = watch
    stats = watch.run(duration=30)
    assert time.monotonic() - t0 < 15 and stats.callback_errors == 0, stats.errors
    assert stats.files == 1


def test_a_callback_that_exits_ends_the_watch_and_is_counted(tmp_path: Path) -> None:
    """``sys.exit()`` in the callback killed the worker silently: files read, never handed."""
    inp = tmp_path / "in"
    inp.mkdir()
    calls: list[str] = []

    def on_file(path: str, kind: str) -> None:
        calls.append(Path(path).name)
        sys.exit(3)

    drop(inp, "a.txt", b"one")
    t0 = time.monotonic()
    watch = watch_in_memory(inp, on_file, auto_delete=True, duration=30)  # blocking
    assert time.monotonic() - t0 < 15  # ended by the exit, not by the 30 s
    assert calls == ["a.txt"] and not watch.running
    assert watch.stats.callback_errors == 1 and "SystemExit" in watch.stats.errors[-1]
    assert (inp / "a.txt").read_bytes() == b"one"  # it failed: the file stays


def test_empty_files_under_a_slow_callback_are_bounded_by_the_budget(tmp_path: Path) -> None:
    """Empty files were charged 0 bytes: a slow callback let every one be read and queued."""
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(300):
        (inp / f"f{i:03d}.txt").write_bytes(b"")
    gate = threading.Event()
    seen: list[str] = []

    def slow(path: str, kind: str) -> None:
        gate.wait()
        seen.append(path)

    watch = watch_in_memory(
        inp, slow, stable_seconds=0.1, max_inflight_bytes=16 << 10, background=True
    )
    try:
        until(lambda: watch.budget.refused > 0)
        time.sleep(0.5)
        in_flight = watch.source.files.in_flight
        gate.set()
        until(lambda: len(seen) == 300, timeout=60)
    finally:
        gate.set()
        stats = watch.stop()
    assert in_flight <= 16, in_flight  # 16 KiB of budget: a handful of files, not 300
    assert stats.files == 300 and stats.callback_errors == 0


def test_an_output_folder_that_is_the_watched_folder_is_refused(tmp_path: Path) -> None:
    """Each batch's archive landed in the watched folder and was packed into the next batch."""
    inp = tmp_path / "in"
    inp.mkdir()
    for out in (inp, tmp_path / "in" / "." / ""):
        with pytest.raises(ValueError, match="watched folder"):
            watch_and_pack(inp, out, lambda b: None, background=True)
    # a folder inside the watched one is not watched (not recursive): allowed
    got: list[list[str]] = []
    watch = watch_and_pack(
        inp,
        inp / "batches",
        lambda b: got.append(LiveBatchLoader(b).names),
        interval_seconds=0.2,
        background=True,
    )
    try:
        drop(inp, "a.txt", b"one")
        until(lambda: watch.stats.batches == 1)
        time.sleep(1.0)
    finally:
        watch.stop()
    assert got == [["a.txt"]]


def test_an_unknown_archive_format_is_refused_at_the_call(tmp_path: Path) -> None:
    """``archive_format="rar"`` started a watch whose every batch then failed."""
    with pytest.raises(ValueError, match="archive_format"):
        watch_and_pack(tmp_path, None, lambda b: None, archive_format="rar", background=True)


def test_stop_on_a_watch_never_started_is_harmless(tmp_path: Path) -> None:
    settings = WatchSettings(tmp_path, WindowPolicy(1.0, 1, 1 << 20, close_when_idle=False))
    watch = LiveWatch(settings, lambda w: None)
    assert watch.stop().files == 0 and not watch.running


def test_a_file_over_half_the_budget_is_quarantined_as_documented(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    got: list[str] = []
    watch = watch_in_memory(
        inp, lambda p, k: got.append(p), max_inflight_bytes=4096, background=True
    )
    try:
        drop(inp, "big.bin", b"x" * 3000)  # under max_file_bytes, over 4096 / 2
        drop(inp, "ok.bin", b"x" * 1000)
        until(lambda: watch.stats.quarantined == 1 and len(got) == 1)
    finally:
        stats = watch.stop()
    assert [Path(p).name for p in got] == ["ok.bin"] and stats.input_errors == 1
    assert (inp / ".quarantine" / "file" / "big.bin").stat().st_size == 3000


def test_a_watch_never_stopped_does_not_hold_the_interpreter_exit(tmp_path: Path) -> None:
    """Its threads are daemons: the program ends, the open batch's files stay on disk."""
    inp = tmp_path / "in"
    inp.mkdir()
    code = (
        "import time\n"
        "from cdml_edge.live import watch_and_pack, watch_in_memory\n"
        f"watch_and_pack({str(inp)!r}, None, print, interval_seconds=60, auto_delete=True,\n"
        "               background=True)\n"
        f"watch_in_memory({str(inp)!r}, lambda p, k: time.sleep(60), background=True)\n"
        "time.sleep(3)\n"
        "print('leaving', flush=True)\n"
    )
    drop(inp, "a.txt", b"one")
    t0 = time.monotonic()
    r = run_watch(code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "leaving\n" and time.monotonic() - t0 < 30
    assert (inp / "a.txt").read_bytes() == b"one"
