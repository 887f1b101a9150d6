"""A full retention disk in the running agent: results keep flowing, an event and a counter;
with ``retention.required`` (the default) the source files wait until the ring kept their
windows, and are released by themselves once the disk has room again."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _full_disk import FullDisk, full_disk_fixture  # noqa: F401 - the fixture
from agent_fixtures import brightness_classifier, jpeg, wait_for, write_atomic

import cdml_edge.agent.retry as retry_mod
import cdml_edge.store.retention as retention_mod
from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _agent(tmp_path: Path, ring: Path, required: bool) -> Agent:
    brightness_classifier(tmp_path / "brightness.onnx")
    cfg_path = tmp_path / "factory.yaml"
    cfg_path.write_text(textwrap.dedent(f"""
        device: {{id: edge-1}}
        sources:
          - {{name: cam1, kind: folder, path: in/cam1, modality: image,
             window: {{seconds: 100ms, max_items: 2}}, on_done: delete, stable_seconds: 0.1}}
        models:
          image: {{path: brightness.onnx}}
        retention: {{dir: {ring}, max_bytes: 1GiB, required: {str(required).lower()}}}
        output: {{jsonl: out.jsonl}}
        health: {{interval: 0.2s}}
    """))
    (tmp_path / "in/cam1").mkdir(parents=True)
    return Agent(load_config(cfg_path), cfg_path)


def _inject(full_disk: FullDisk) -> None:
    full_disk.inject_call(retention_mod, "write_file")  # the ring's writes


def test_files_wait_for_the_ring_and_are_released_once_it_has_room(
    full_disk: FullDisk, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry_mod, "RETENTION_PROBE_S", 0.5)
    agent = _agent(tmp_path, full_disk.path, required=True)
    cam, out = tmp_path / "in/cam1", tmp_path / "out.jsonl"
    agent.start()
    try:
        _inject(full_disk)
        full_disk.fill()
        n = 8
        for i in range(n):
            write_atomic(cam / f"f{i:02d}.jpg", jpeg(i * 30, size=64))
        wait_for(lambda: len({m["payload"]["id"] for m in _lines(out)
                              if m["topic"].endswith("/result")}) >= n,
                 timeout=60, what="every result published while the ring is full")
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


def test_required_false_releases_files_the_ring_could_not_keep(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    agent = _agent(tmp_path, full_disk.path, required=False)
    cam, out = tmp_path / "in/cam1", tmp_path / "out.jsonl"
    agent.start()
    try:
        _inject(full_disk)
        full_disk.fill()
        for i in range(6):
            write_atomic(cam / f"f{i:02d}.jpg", jpeg(i * 30, size=64))
        wait_for(lambda: not any(cam.iterdir()), timeout=60, what="files released")
    finally:
        agent.stop()
    assert agent.retention is not None
    assert agent.retention.counters["disk_full"] >= 1 and agent.retention.counters["stored"] == 0
    ids = {m["payload"]["id"] for m in _lines(out) if m["topic"].endswith("/result")}
    assert len(ids) == 6
