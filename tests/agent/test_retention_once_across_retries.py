"""A window the output refused is not kept in the retention ring: its files come again.

The ring kept each scored window before the output was given it. A window the output
refused (a full disk under ``output.jsonl``) is taken again, scored again under a new
window id and kept again: each refusal left a copy of the same items in the ring, and a
replay or export of the ring then gave those items once per refusal (duplicate training
samples). A refused window is now withdrawn from the ring; the one delivered stays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agent_runs import of_kind, read_jsonl
from helpers.full_disk_runs import FILES, config, run_through_a_full_disk

from cdml_edge.store.retention import RetentionRing

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


def test_a_window_the_output_refused_is_kept_once_in_the_ring(tmp_path: Path, models: Path) -> None:
    ring_dir = tmp_path / "ring"
    cfg = config(tmp_path, None, retention={"dir": str(ring_dir), "max_bytes": "64MiB"})
    agent = run_through_a_full_disk(tmp_path, cfg, refusals=3)
    results = of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")
    assert sorted(r["item"] for r in results) == sorted(FILES)
    assert agent.metrics.totals()["items"] == len(FILES)
    ring = RetentionRing(ring_dir, max_bytes=64 << 20)
    try:
        kept = [it.name for r in ring.windows() for it in ring.load(r).manifest.items]
        assert sorted(kept) == sorted(FILES), f"the ring holds {sorted(kept)}"
    finally:
        ring.close()
    assert agent.retention is not None
    assert agent.retention.counters.get("withdrawn", 0) >= 1  # the refused windows went
