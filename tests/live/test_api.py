"""The seed's live API on real folders (watchdog): watch_and_pack and watch_in_memory."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from helpers.dataset_data import class_images, wav
from helpers.live_runs import WatchProcess, drop, until

from cdml_edge import LiveBatchLoader, PackedBatch, watch_and_pack, watch_in_memory
from cdml_edge.archive import open_archive


def test_watch_and_pack_hands_each_batch_then_deletes(tmp_path: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    seen: list[tuple[PackedBatch, bool, list[str], dict]] = []

    def on_batch(batch: PackedBatch) -> None:
        live = LiveBatchLoader(batch)
        on_disk = batch.path is not None and batch.path.is_file()
        inputs_there = all(p.exists() for p in batch.files)
        seen.append((batch, on_disk and inputs_there, live.names, live.summary()))

    watch = watch_and_pack(
        inp, out, on_batch, interval_seconds=0.5, auto_delete=True, background=True
    )
    try:
        drop(inp, "cam.jpg", class_images(1)[0][1])
        drop(inp, "mic.wav", wav(0.25, 440))
        drop(inp, "plc.csv", b"t,v\n1,2\n")
        until(lambda: watch.stats.files == 3)
    finally:
        stats = watch.stop()
    names = sorted(n for _, _, ns, _ in seen for n in ns)
    assert names == ["cam.jpg", "mic.wav", "plc.csv"]
    batch, present, _, summary = seen[0]
    assert present  # the archive written and the inputs still there while the callback ran
    assert str(batch).endswith(".zip") and batch.name == Path(str(batch)).name
    assert summary["manifest_present"] and summary["total_files"] == len(batch)
    with open_archive(batch.archive) as arc:
        manifest = json.loads(arc.read("manifest.json"))
    assert [i["name"] for i in manifest["items"]] == [m for m in seen[0][2]]
    # auto_delete after success: inputs and written archives are gone
    assert sorted(p.name for p in inp.iterdir()) == [] and list(out.iterdir()) == []
    assert (stats.files, stats.deleted, stats.callback_errors) == (3, 3, 0)


def test_a_failing_callback_leaves_everything_on_disk(tmp_path: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    calls: list[list[str]] = []

    def on_batch(batch: PackedBatch) -> None:
        calls.append(LiveBatchLoader(batch).names)
        raise RuntimeError("model not ready")

    watch = watch_and_pack(
        inp, out, on_batch, interval_seconds=0.3, auto_delete=True, background=True
    )
    try:
        drop(inp, "a.txt", b"one\n")
        until(lambda: watch.stats.callback_errors == 1)
        time.sleep(1.0)  # not taken again while unchanged
        assert calls == [["a.txt"]]
        drop(inp, "a.txt", b"one, changed\n")  # a new version is a new input
        until(lambda: watch.stats.callback_errors == 2)
    finally:
        stats = watch.stop()
    assert (inp / "a.txt").read_bytes() == b"one, changed\n"
    assert len(list(out.iterdir())) == 2  # both written archives kept
    assert stats.files == 0 and stats.deleted == 0 and "model not ready" in stats.errors[-1]


def test_without_auto_delete_inputs_stay_and_are_not_packed_twice(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    batches: list[list[str]] = []
    watch = watch_and_pack(
        inp,
        None,
        lambda b: batches.append(LiveBatchLoader(b).names),
        interval_seconds=0.3,
        archive_format="tar.zst",
        background=True,
    )
    try:
        drop(inp, "a.json", b'{"x": 1}')
        until(lambda: watch.stats.batches == 1)
        time.sleep(1.0)
    finally:
        watch.stop()
    assert batches == [["a.json"]] and (inp / "a.json").exists()


def test_unwritten_batch_is_not_a_path(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    got: list[PackedBatch] = []
    watch = watch_and_pack(inp, on_batch_ready=got.append, interval_seconds=0.2, background=True)
    try:
        drop(inp, "a.txt", b"x")
        until(lambda: len(got) == 1)
    finally:
        watch.stop()
    assert got[0].path is None and got[0].archive[:4] == b"PK\x03\x04"
    with pytest.raises(TypeError, match="no output_folder"):
        os.fspath(got[0])


def test_bad_inputs_are_quarantined_and_counted(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    got: list[list[str]] = []
    watch = watch_and_pack(
        inp,
        None,
        lambda b: got.append(LiveBatchLoader(b).names),
        interval_seconds=0.2,
        max_bytes=1000,
        background=True,
    )
    try:
        drop(inp, "huge.bin", b"x" * 5000)  # larger than a batch may hold: never read
        os.mkfifo(inp / "pipe.txt")  # not a regular file: never opened, left alone
        drop(inp, "ok.txt", b"fine")
        until(lambda: watch.stats.files == 1 and watch.stats.quarantined == 1)
    finally:
        stats = watch.stop()
    assert got == [["ok.txt"]]
    assert (inp / ".quarantine" / "batch" / "huge.bin").stat().st_size == 5000
    assert (inp / "pipe.txt").exists() and stats.input_errors >= 2


def test_the_byte_budget_pauses_intake_and_loses_nothing(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    sizes: list[int] = []

    def slow(batch: PackedBatch) -> None:
        time.sleep(0.2)
        sizes.append(len(batch))

    for i in range(12):
        drop(inp, f"f{i:02d}.bin", bytes([i]) * 1000)
    watch = watch_and_pack(
        inp,
        None,
        slow,
        interval_seconds=0.1,
        max_inflight_bytes=4000,
        auto_delete=True,
        background=True,
    )
    try:
        until(lambda: watch.stats.files == 12)
    finally:
        watch.stop()
    assert watch.budget.peak <= 4000 and watch.budget.refused > 0
    assert sum(sizes) == 12 and max(sizes) <= 2 and list(inp.iterdir()) == []


def test_watch_in_memory_calls_back_per_file_with_seed_types(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    seen: list[tuple[str, str, bytes]] = []
    stop = threading.Event()
    t = threading.Thread(
        target=watch_in_memory,
        args=(inp, lambda p, kind, data: seen.append((p, kind, data))),
        kwargs={"with_data": True, "stop": stop, "auto_delete": True},
    )
    t.start()
    try:
        files = {
            "a.jpg": "image",
            "b.wav": "audio",
            "c.csv": "csv",
            "d.json": "json",
            "e.txt": "text",
            "f.npy": "timeseries",
            "g.bin": "unknown",
        }
        for name in files:
            drop(inp, name, name.encode())
        until(lambda: len(seen) == len(files))
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert {Path(p).name: kind for p, kind, _ in seen} == files
    assert all(data == Path(p).name.encode() for p, _, data in seen)
    until(lambda: list(inp.iterdir()) == [])  # deleted after each callback returned


def test_blocking_call_ends_after_duration(tmp_path: Path) -> None:
    t0 = time.monotonic()
    watch = watch_in_memory(tmp_path, lambda p, k: None, duration=0.5)
    assert 0.5 <= time.monotonic() - t0 < 10 and not watch.running


def test_ctrl_c_stops_and_handles_the_open_batch(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    code = (
        "import sys\n"
        "from cdml_edge.live import watch_and_pack\n"
        "from cdml_edge import LiveBatchLoader\n"
        "def cb(b): print('batch', LiveBatchLoader(b).names, flush=True)\n"
        "print('ready', flush=True)\n"
        f"w = watch_and_pack({str(inp)!r}, None, cb, interval_seconds=60)\n"
        "print('files', w.stats.files, 'torch' in sys.modules, flush=True)\n"
    )
    with WatchProcess(code) as proc:
        assert proc.line() == "ready"
        time.sleep(1.5)  # the watch is armed
        drop(inp, "a.txt", b"late")
        time.sleep(1.5)  # taken, waiting in the open batch (60 s interval)
        out, _ = proc.interrupt(timeout=30)
    assert proc.returncode == 0
    assert out.splitlines() == ["batch ['a.txt']", "files 1 False"]


def test_the_watch_survives_its_folder_being_removed(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    names: list[str] = []
    watch = watch_in_memory(inp, lambda p, kind: names.append(Path(p).name), background=True)
    try:
        drop(inp, "a.txt", b"1")
        until(lambda: names == ["a.txt"])
        shutil.rmtree(inp)  # the watch is lost; the supervised source arms a new one
        until(lambda: inp.is_dir())  # made again by the restarted watch
        time.sleep(0.5)
        drop(inp, "b.txt", b"2")
        until(lambda: names == ["a.txt", "b.txt"])
    finally:
        stats = watch.stop()
    assert any("died" in e for e in stats.errors)
