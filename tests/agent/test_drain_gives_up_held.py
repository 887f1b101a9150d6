"""A drain (stop, reload) does not wait out its timeout for a window a tee holds.

With MQTT and JSON lines, a window the broker took and the full disk refused is held for
the file: in flight until the file takes it. The drain waited for it until its timeout
(10 s) and reported windows left in flight. It now gives such windows up once only they are
left: their files stay for the next run.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for, write_atomic
from helpers.full_disk_runs import config, full_disk

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.outputs.tee import TeeOutput

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


def test_a_stop_gives_up_a_held_window_and_drains(tmp_path: Path, models: Path) -> None:
    cfg = config(tmp_path, f"t{uuid.uuid4().hex[:8]}")
    full_disk(tmp_path / "out.jsonl")
    agent = Agent(load_config(cfg), cfg)
    agent.start()
    cam = tmp_path / "in/cam"
    try:
        assert isinstance(agent.output, TeeOutput)
        write_atomic(cam / "a.jpg", jpeg(20))
        wait_for(lambda: agent.output.held >= 1, timeout=30, what="a window held for the file")
    finally:
        drained = agent.stop()
    assert drained, "the drain waited out its timeout for the held window"
    assert (cam / "a.jpg").exists()  # not durable in the file: kept for the next run
    assert agent.output.held == 0
