"""An agent whose keep folder's record lives on a small disk the test fills."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from cdml_edge.agent.app import Agent
from helpers.agent_runs import of_kind, read_jsonl, write_config
from helpers.full_disk import small_tmpfs


def small_state(tmp_path: Path) -> Iterator[Path]:
    """The agent's state folder on a 512 KiB tmpfs of its own (a fixture's body)."""
    with small_tmpfs(tmp_path / "state", "512k") as path:
        yield path


def keep_config(tmp_path: Path, state: Path) -> Path:
    """The test agent's configuration: its camera folder ``on_done: keep``, ``state`` its state."""
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["state_dir"] = str(state)
    doc["sources"][0].update(on_done="keep", stable_seconds=0.1)
    cfg_path.write_text(yaml.safe_dump(doc))
    (tmp_path / "in/cam").mkdir(parents=True)
    return cfg_path


def results_of(out: Path, name: str) -> int:
    """How many results of ``name`` the JSON-lines file ``out`` holds."""
    return sum(r["item"] == name for r in of_kind(read_jsonl(out), "cam/result"))


def windows_done(agent: Agent) -> float:
    """Windows of the camera folder the agent finished."""
    return float(agent.metrics.windows.labels(source="cam")._value.get())
