"""A Ray worker killed in the middle of a fleet job: the job goes on and loses nothing.

The replay actor's process is killed (SIGKILL, as the kernel's OOM killer does) while it
scores its batch; the actor is started again, the batch scored again, and the results are
still the local replay's, item for item, none twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import replay_to_jsonl
from cdml_edge.retrain.fleet.scorer import ship_models
from cdml_edge.retrain.fleet.session import FleetTuning

pytestmark = pytest.mark.slow


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _ours(pid: int) -> bool:
    """Whether ``pid`` descends from this process (our Ray, not another test process's)."""
    while pid > 1:
        pid = _parent(pid)
        if pid == os.getpid():
            return True
    return False


def _processes_titled(prefix: str) -> list[int]:
    """Our pids whose command line (a Ray worker's title) starts with ``prefix``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if cmdline.startswith(prefix.encode()) and _ours(int(entry)):
            pids.append(int(entry))
    return pids


def _kill_first(prefix: str, killed: list[int], done: threading.Event) -> None:
    while not done.is_set() and not killed:
        for pid in _processes_titled(prefix):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.002)


@pytest.mark.usefixtures("ray_cluster")
def test_a_replay_actor_killed_mid_batch_is_restarted_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    from cdml_edge.retrain.fleet import fleet_replay

    model = brightness_classifier(tmp_path / "brightness.onnx")
    ring = tmp_path / "root" / "device=edge-1" / "ring"
    values = [[(17 * w + 29 * i) % 256 for i in range(6)] for w in range(40)]
    scored_ring(ring, model, values)
    (ring / "catalog.sqlite").unlink()
    runners = load_runners({"image": (model, ModelOverrides())}, warm_up=False)
    local = replay_to_jsonl(ring, runners, tmp_path / "local.jsonl")

    killed: list[int] = []
    done = threading.Event()
    killer = threading.Thread(target=_kill_first, args=("ray::ReplayScorer.run", killed, done))
    killer.start()
    try:
        got = fleet_replay(
            str(tmp_path / "root"),
            ship_models(runners, {}, [model]),
            {"image": "brightness@1.0.0"},
            tmp_path / "results.parquet",
            tuning=FleetTuning(actors=1, batches_per_actor=1),  # one batch: 40 windows
        )
    finally:
        done.set()
        killer.join()
    assert killed, "the actor was never caught running its batch"
    table = pq.read_table(tmp_path / "results.parquet").to_pylist()
    table.sort(key=lambda r: (r["closed_at"], r["window_id"], r["position"]))
    assert "".join(r["record"] + "\n" for r in table) == (tmp_path / "local.jsonl").read_text()
    assert (got.stats.windows, got.stats.items) == (local.windows, local.items) == (40, 240)
