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
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic
from helpers.full_disk_runs import config, full_disk, room_again

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


def test_the_given_up_file_is_scored_again_at_the_next_start(tmp_path: Path, models: Path) -> None:
    """Given up at the drain, not because it cannot be delivered: the next run takes it.

    It was recorded as kept (as a window too large for the broker is), so no later run
    scored it again and the file part never got its results.
    """
    cfg = config(tmp_path, f"t{uuid.uuid4().hex[:8]}")
    out = tmp_path / "out.jsonl"
    full_disk(out)
    agent = Agent(load_config(cfg), cfg)
    agent.start()
    cam = tmp_path / "in/cam"
    try:
        write_atomic(cam / "a.jpg", jpeg(20))
        wait_for(lambda: agent.output.held >= 1, timeout=30, what="a window held for the file")
    finally:
        assert agent.stop()
    room_again(out)  # the disk has room at the next start
    again = Agent(load_config(cfg), cfg)
    again.start()
    try:
        wait_for(
            lambda: any(r["item"] == "a.jpg" for r in of_kind(read_jsonl(out), "/result")),
            timeout=30,
            what="a.jpg scored again into the file",
        )
    finally:
        again.stop()
