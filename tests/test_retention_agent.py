"""A full retention disk in the running agent: health event + counter, results keep flowing."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from agent_fixtures import brightness_classifier, jpeg, wait_for, write_atomic

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


@pytest.fixture
def tiny_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "ring"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_agent_keeps_publishing_when_the_ring_disk_is_full(tmp_path: Path, tiny_fs: Path) -> None:
    brightness_classifier(tmp_path / "brightness.onnx")
    cfg_path = tmp_path / "factory.yaml"
    cfg_path.write_text(
        textwrap.dedent("""
        device: {id: edge-1}
        sources:
          - {name: cam1, kind: folder, path: in/cam1, modality: image,
             window: {seconds: 100ms, max_items: 2}, on_done: delete, stable_seconds: 0.1}
        models:
          image: {path: brightness.onnx}
        retention: {dir: ring, max_bytes: 1GiB}
        output: {jsonl: out.jsonl}
        health: {interval: 0.2s}
    """)
    )
    cam = tmp_path / "in/cam1"
    cam.mkdir(parents=True)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        n = 24
        for i in range(n):
            write_atomic(cam / f"f{i:02d}.jpg", jpeg(i * 10, size=96))
        out = tmp_path / "out.jsonl"
        wait_for(
            lambda: sum(m["topic"].endswith("/result") for m in _lines(out)) >= n,
            timeout=60,
            what="every result published",
        )
        wait_for(lambda: not any(cam.iterdir()), timeout=30, what="source files released")
        health = [m["payload"] for m in _lines(out) if m["topic"].endswith("/health")]
        n_health = len(health)
        wait_for(
            lambda: len([m for m in _lines(out) if m["topic"].endswith("/health")]) > n_health,
            timeout=10,
            what="a health message after the full disk",
        )
    finally:
        agent.stop()
    lines = _lines(tmp_path / "out.jsonl")
    events = [m["payload"] for m in lines if m["topic"] == "cdml/edge-1/cam1/error"]
    assert [e["error_type"] for e in events].count("retention_disk_full") == 1
    assert sum(m["topic"].endswith("/result") for m in lines) == n
    assert agent.retention is not None
    stats = agent.retention.counters
    assert stats["disk_full"] >= 1 and stats["stored"] >= 1
    windows = sum(m["topic"].endswith("/window") for m in lines)
    assert stats["stored"] + stats["disk_full"] == windows
    assert [m["payload"] for m in lines if m["topic"].endswith("/health")][-1]["errors"] >= 1
