"""A source whose every item fails is a degraded part: ``/healthz`` and health say so.

Bad items are quarantined one by one and the pipeline makes progress, so nothing else
noticed: the agent reported ``ok`` while a camera's every frame failed.
"""

from __future__ import annotations

import signal
from pathlib import Path

from helpers.agent_runs import (
    jpeg,
    of_kind,
    read_jsonl,
    start_agent,
    wait_for,
    write_atomic,
    write_config,
)

from cdml_edge.agent.failing import FAILED_IN_A_ROW, FailingSources


def test_a_run_of_failures_degrades_and_one_success_clears() -> None:
    failing = FailingSources(threshold=3)
    failing.observe("cam", 0, 2, "DecodeError: a.jpg: truncated")
    assert failing.degraded() == {}
    failing.observe("cam", 0, 1, "DecodeError: b.jpg: truncated")
    assert failing.degraded() == {
        "source cam items": "its last 3 items all failed (DecodeError: b.jpg: truncated)"
    }
    assert failing.degraded({"vib"}) == {}  # a source no longer configured
    failing.observe("cam", 1, 5, "DecodeError: c.jpg")  # one scored in the window: cleared
    assert failing.degraded() == {}


def test_an_agent_whose_every_item_fails_says_so(tmp_path: Path, models: Path) -> None:
    cfg = write_config(tmp_path)
    out, log = tmp_path / "out.jsonl", tmp_path / "agent.log"
    proc = start_agent(cfg, log, cwd=tmp_path)
    cam = tmp_path / "in/cam"

    def degraded() -> dict[str, str]:
        health = of_kind(read_jsonl(out), "/health")
        return (health[-1].get("degraded") or {}) if health else {}

    try:
        wait_for(lambda: of_kind(read_jsonl(out), "/status") != [], timeout=60, what="online")
        wait_for(cam.is_dir, what="the source folder")
        for i in range(FAILED_IN_A_ROW):
            write_atomic(cam / f"bad-{i:02d}.jpg", b"\xff\xd8 not a jpeg at all")
        wait_for(lambda: "source cam items" in degraded(), timeout=30, what="degraded")
        assert "DecodeError" in degraded()["source cam items"], degraded()
        assert "source vib items" not in degraded()
        write_atomic(cam / "good.jpg", jpeg(200))
        wait_for(lambda: "source cam items" not in degraded(), timeout=30, what="cleared")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
