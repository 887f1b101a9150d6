"""The fleet replay's summary is the local replay's, counter for counter.

Windows retained by an appliance that ran without a model get their first verdict from the
replay (nothing to change): the local summary says so, and so must the fleet's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import replay_to_jsonl
from cdml_edge.retrain.fleet.scorer import ship_models
from cdml_edge.retrain.replay_job import ReplaySummary
from cdml_edge.store.retention import RetentionRing
from cdml_edge.window.items import Item, Window
from cdml_edge.window.pack import pack_window
from cdml_edge.window.payloads import item_id
from cdml_edge.window.score import score_window

pytestmark = pytest.mark.slow


def _unscored_ring(ring_dir: Path, values: list[list[int]]) -> None:
    """Windows packed, scored with no model and retained, as an appliance without one does."""
    ring = RetentionRing(ring_dir, max_bytes=10**9, fsync=False)
    for w, vals in enumerate(values):
        opened = 1_790_000_000.0 + 10 * w
        win = Window(window_id=f"cam1-w{w:03d}", source="cam1", opened_ts=opened)
        for i, v in enumerate(vals):
            data, name, mtime_ns = jpeg(v), f"frame_{w}_{i}_{v}.jpg", int((opened + i) * 1e9)
            win.items.append(
                Item(
                    "cam1",
                    name,
                    "image",
                    mtime_ns / 1e9,
                    data,
                    item_id("cam1", name, len(data), mtime_ns),
                    None,
                    len(data),
                    mtime_ns,
                )
            )
        win.closed_ts = opened + 5
        packed = pack_window(win, device="edge-1", modality="image")
        outcome = score_window(packed.archive, {}, device="edge-1", archive_name=packed.name)
        assert ring.store(packed.archive, outcome.manifest).stored
    ring.close()
    (ring_dir / "catalog.sqlite").unlink()


def _counts(line: str) -> str:
    """A summary line without its throughput and its output path."""
    return re.sub(r"\(\d+ items/s\)", "", line.split(" -> ")[0])


@pytest.mark.usefixtures("ray_cluster")
def test_first_verdicts_and_modalities_are_counted_as_the_local_replay_does(
    tmp_path: Path,
) -> None:
    from cdml_edge.retrain.fleet import fleet_replay

    model = brightness_classifier(tmp_path / "brightness.onnx")
    ring = tmp_path / "root" / "device=edge-1" / "ring"
    _unscored_ring(ring, [[10, 200], [250, 5, 60]])
    runners = load_runners({"image": (model, ModelOverrides())}, warm_up=False)
    local = replay_to_jsonl(ring, runners, tmp_path / "local.jsonl")
    assert local.first_verdicts == 5  # the premise: nothing retained had a verdict
    got = fleet_replay(
        str(tmp_path / "root"),
        ship_models(runners, {}, [model]),
        {"image": "brightness@1.0.0"},
        tmp_path / "results.parquet",
    )
    assert got.stats.first_verdicts == local.first_verdicts
    assert got.stats.by_modality == local.by_modality == {"image": 5}
    head = got.line().splitlines()[0]
    assert _counts(head) == _counts(ReplaySummary(local, tmp_path / "x").line())
    assert "5 first verdicts" in head
