"""A full retention disk in the running agent: results keep flowing, an event and a counter.

With ``retention.required`` (the default) the source files wait until the ring kept their
windows, and are released by themselves once the disk has room again.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers.agent_runs import cam_config, jpeg, wait_for, write_atomic
from helpers.full_disk import FullDisk

import cdml_edge.agent.retry as retry_mod
import cdml_edge.store.retention as retention_mod
from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _started_on_a_full_ring(
    tmp_path: Path, full_disk: FullDisk, required: bool
) -> tuple[Agent, Path, Path]:
    """An agent whose retention ring is on ``full_disk``, started, then the disk filled.

    Returns the agent, its watched folder and its JSON-lines output.
    """
    cfg_path = cam_config(
        tmp_path,
        textwrap.dedent(f"""\
        retention: {{dir: {full_disk.path}, max_bytes: 1GiB, required: {str(required).lower()}}}
        output: {{jsonl: out.jsonl}}
        health: {{interval: 0.2s}}
    """),
    )
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    full_disk.inject_call(retention_mod, "write_file")  # the ring's writes
    full_disk.fill()
    return agent, tmp_path / "in/cam1", tmp_path / "out.jsonl"


def test_files_wait_for_the_ring_and_are_released_once_it_has_room(
    full_disk: FullDisk, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry_mod, "RETENTION_PROBE_S", 0.5)
    agent, cam, out = _started_on_a_full_ring(tmp_path, full_disk, required=True)
    try:
        n = 8
        for i in range(n):
            write_atomic(cam / f"f{i:02d}.jpg", jpeg(i * 30, size=64))
        wait_for(
            lambda: (
                len({m["payload"]["id"] for m in _lines(out) if m["topic"].endswith("/result")})
                >= n
            ),
            timeout=60,
            what="every result published while the ring is full",
        )
        assert agent.retention is not None and agent.retention.degraded is not None
        assert len(list(cam.iterdir())) == n  # nothing released: the ring kept nothing
        assert agent.retry.held > 0
        full_disk.free()
        wait_for(lambda: not any(cam.iterdir()), timeout=60, what="files released")
        kept = sum(r.n_items for r in agent.retention.windows())
        assert kept >= n
    finally:
        agent.stop()
    lines = _lines(out)
    events = [m["payload"]["error_type"] for m in lines if m["topic"] == "cdml/edge-1/cam1/error"]
    assert events.count("retention_disk_full") == 1 and events[-1] == "retention_disk_ok"
    ids = [m["payload"]["id"] for m in lines if m["topic"].endswith("/result")]
    assert len(set(ids)) == n  # re-scored files repeat their ids (at-least-once)
    health = [m["payload"] for m in lines if m["topic"].endswith("/health")]
    assert health[-1]["errors"] >= 1


def _drop_and_wait_released(cam: Path, n: int) -> None:
    """``n`` JPEGs dropped into ``cam``, then every one of them gone from it."""
    for i in range(n):
        write_atomic(cam / f"f{i:02d}.jpg", jpeg(i * 30, size=64))
    wait_for(lambda: not any(cam.iterdir()), timeout=60, what="files released")


def test_required_false_releases_files_the_ring_could_not_keep(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    agent, cam, out = _started_on_a_full_ring(tmp_path, full_disk, required=False)
    try:
        _drop_and_wait_released(cam, 6)
    finally:
        agent.stop()
    assert agent.retention is not None
    assert agent.retention.counters["disk_full"] >= 1 and agent.retention.counters["stored"] == 0
    ids = {m["payload"]["id"] for m in _lines(out) if m["topic"].endswith("/result")}
    assert len(ids) == 6


def test_windows_too_large_for_the_ring_are_counted_and_their_files_released(
    tmp_path: Path,
) -> None:
    """A bound below a window's two blocks keeps nothing: counted, and nothing held."""
    cfg_path = cam_config(
        tmp_path,
        textwrap.dedent(f"""\
        retention: {{dir: {tmp_path / "ring"}, max_bytes: 4KiB}}
        output: {{jsonl: out.jsonl}}
    """),
    )
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    cam = tmp_path / "in/cam1"
    try:
        _drop_and_wait_released(cam, 3)
    finally:
        agent.stop()
    assert agent.retention is not None and agent.retention.counters["too_large"] >= 1
    got = agent.metrics.registry.get_sample_value(
        "cdml_edge_errors_total", {"stage": "retention_too_large"}
    )
    assert got == agent.retention.counters["too_large"]
