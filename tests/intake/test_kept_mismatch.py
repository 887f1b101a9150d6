"""``keep`` means keep: a well-formed file the model cannot take stays where it is.

A CSV of two columns in a folder scored by a model of three is no bad input: it belongs to
the user of an ``on_done: keep`` folder, who may point another model at it. The real agent
(real folder, real inotify, real ONNX model, the JSON-lines output) leaves it in place with
one error event naming it, counts it, and does not take it again — not at a rescan or a
restart — until it changes. A corrupt file there is still quarantined.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from helpers.agent_runs import of_kind, read_jsonl, wait_for, write_atomic, write_config

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

TWO_COLUMNS = b"a,b\n" + b"".join(b"%d,%d\n" % (i, i) for i in range(8))
THREE_COLUMNS = b"a,b,c\n" + b"0,0,0\n" * 8


def _keep_config(tmp_path: Path) -> Path:
    """The agent test configuration, its CSV source ``vib`` with ``on_done: keep``."""
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    vib = doc["sources"][1]
    vib.update(on_done="keep", stable_seconds=0.1)
    vib.pop("move_to")
    cfg_path.write_text(yaml.safe_dump(doc))
    (tmp_path / "in/vib").mkdir(parents=True)
    return cfg_path


def _events(out: Path, suffix: str) -> list[dict[str, Any]]:
    return of_kind(read_jsonl(out), suffix)


def _scored(out: Path, name: str) -> int:
    return sum(r["item"] == name for r in _events(out, "vib/result"))


def _started(cfg_path: Path) -> Agent:
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    return agent


def _errors_for(agent: Agent, out: Path, n: int, what: str) -> None:
    """Wait for ``n`` error events of ``vib``, then stop ``agent``."""
    try:
        wait_for(lambda: len(_events(out, "vib/error")) == n, what=what)
    finally:
        agent.stop()


def test_a_csv_the_model_cannot_take_is_left_in_a_keep_folder(tmp_path: Path, models: Path) -> None:
    cfg_path = _keep_config(tmp_path)
    vib, out = tmp_path / "in/vib", tmp_path / "out.jsonl"
    agent = _started(cfg_path)
    write_atomic(vib / "narrow.csv", TWO_COLUMNS)
    before = (vib / "narrow.csv").stat()
    _errors_for(agent, out, 1, "the error event")
    [err] = _events(out, "vib/error")
    assert err["item"] == "narrow.csv" and err["error_type"] == "ModelSpecError", err
    assert "expected 3 columns, got 2" in err["message"], err
    assert err["quarantined_path"] is None, err
    assert "left in place" in err["message"] and "on_done: keep" in err["message"], err
    assert (vib / "narrow.csv").read_bytes() == TWO_COLUMNS, "moved or changed"
    assert (vib / "narrow.csv").stat().st_ino == before.st_ino
    assert not list((tmp_path / "quarantine").rglob("narrow*")), "quarantined"
    assert agent.lifecycle.left_in_place == 1 and agent.lifecycle.quarantined == 0
    decode = agent.metrics.errors.labels(stage="decode")._value.get()
    assert decode == 1, decode

    # A restart: its first scan finds narrow.csv (unchanged) and good.csv (newer: taken after
    # narrow.csv, were that taken again) at once.
    write_atomic(vib / "good.csv", THREE_COLUMNS)
    os.utime(vib / "good.csv", (before.st_mtime + 10, before.st_mtime + 10))
    agent = _started(cfg_path)
    try:
        wait_for(lambda: _scored(out, "good.csv") == 1, what="good.csv's result")
    finally:
        agent.stop()
    assert agent.sources["vib"].stats.taken == 1, "narrow.csv taken again"
    assert [e["item"] for e in _events(out, "vib/error")] == ["narrow.csv"]

    write_atomic(vib / "narrow.csv", TWO_COLUMNS + b"8,8\n")  # changed: judged again
    _errors_for(_started(cfg_path), out, 2, "the changed file's event")
    assert (vib / "narrow.csv").read_bytes() == TWO_COLUMNS + b"8,8\n"
    assert _scored(out, "good.csv") == 1  # kept, not scored again


def test_a_corrupt_csv_in_a_keep_folder_is_still_quarantined(tmp_path: Path, models: Path) -> None:
    """Rows of different widths: a bad input, moved to the quarantine as before."""
    cfg_path = _keep_config(tmp_path)
    vib, out = tmp_path / "in/vib", tmp_path / "out.jsonl"
    agent = _started(cfg_path)
    write_atomic(vib / "torn.csv", b"a,b,c\n1,2,3\n4,5\n")
    _errors_for(agent, out, 1, "the error event")
    [err] = _events(out, "vib/error")
    assert err["item"] == "torn.csv" and err["error_type"] == "DecodeError", err
    assert err["quarantined_path"] and Path(err["quarantined_path"]).exists(), err
    assert not (vib / "torn.csv").exists()
    assert agent.lifecycle.quarantined == 1 and agent.lifecycle.left_in_place == 0
