"""Dynamic batching in the running agent: a window closes as soon as a worker is free."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic
from helpers.models import brightness_classifier

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


def _config(tmp_path: Path, close_when_idle: bool) -> Path:
    brightness_classifier(tmp_path / "b.onnx")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        textwrap.dedent(f"""
        sources:
          - name: cam
            path: in
            modality: image
            window: {{seconds: 30s, max_items: 64, close_when_idle: {str(close_when_idle).lower()}}}
        models:
          image: {{path: b.onnx}}
        quarantine: {{dir: quarantine}}
        output: {{jsonl: out.jsonl}}
        """)
    )
    return cfg


@pytest.mark.parametrize("close_when_idle", [True, False])
def test_an_idle_agent_scores_a_file_at_once(tmp_path: Path, close_when_idle: bool) -> None:
    """Windows of up to 30 s, with and without close_when_idle.

    With close_when_idle (the default) each file is scored as it arrives; without it, the file
    waits for its window to end.
    """
    cfg = _config(tmp_path, close_when_idle)
    agent = Agent(load_config(cfg), cfg)
    agent.start()
    out = tmp_path / "out.jsonl"
    try:
        t0 = time.monotonic()
        write_atomic(tmp_path / "in" / "a.jpg", jpeg(20))
        if close_when_idle:
            wait_for(lambda: of_kind(read_jsonl(out), "/result"), timeout=10, what="result")
            assert time.monotonic() - t0 < 10  # the window had 30 s to go
            write_atomic(tmp_path / "in" / "b.jpg", jpeg(220))
            wait_for(
                lambda: len(of_kind(read_jsonl(out), "/window")) == 2,
                timeout=10,
                what="a second window",
            )
        else:
            time.sleep(1.5)
            assert of_kind(read_jsonl(out), "/result") == []
    finally:
        agent.stop()
    results = of_kind(read_jsonl(out), "/result")
    assert [r["item"] for r in results] == (["a.jpg", "b.jpg"] if close_when_idle else ["a.jpg"])
