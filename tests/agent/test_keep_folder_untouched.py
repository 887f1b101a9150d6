"""``keep`` means keep: no fault moves or deletes a file of an ``on_done: keep`` folder.

Three paths used to move the user's file to the quarantine: a file too large for a window
(but small enough for the quarantine), a CSV that lacks the columns the model names (a model
mismatch, no bad file), and a file whose windows failed three times (a model that crashes on
it). Each is now left where it is, reported once with an event whose ``quarantined_path`` is
``null`` and whose message ends ``; left in place (on_done: keep)``, counted, and not taken
again until it changes. The real agent: real folders, inotify, ONNX models, JSON lines out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from helpers.agent_runs import (
    FailingSession,
    jpeg,
    of_kind,
    read_jsonl,
    wait_for,
    write_atomic,
    write_config,
)

from cdml_edge.agent.app import Agent
from cdml_edge.agent.retry import WINDOW_ATTEMPTS
from cdml_edge.config import load_config

KEPT = "; left in place (on_done: keep)"


def _keep_config(tmp_path: Path, **changes: Any) -> Path:
    """The agent test configuration, both sources ``on_done: keep``; ``changes`` applied."""
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    for src in doc["sources"]:
        src.update(on_done="keep", stable_seconds=0.1)
        src.pop("move_to", None)
        (tmp_path / src["path"]).mkdir(parents=True)
    if "max_bytes" in changes:
        doc["sources"][0]["window"]["max_bytes"] = changes["max_bytes"]
    if "columns" in changes:
        doc["models"]["csv"]["input"] = {"columns": changes["columns"]}
    cfg_path.write_text(yaml.safe_dump(doc))
    return cfg_path


def _started(cfg_path: Path) -> Agent:
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    return agent


def _errors(out: Path, source: str) -> list[dict[str, Any]]:
    return of_kind(read_jsonl(out), f"{source}/error")


def _results(out: Path, source: str) -> list[dict[str, Any]]:
    return of_kind(read_jsonl(out), f"{source}/result")


def _untouched(path: Path, data: bytes, ino: int, tmp_path: Path) -> None:
    assert path.read_bytes() == data, "moved or changed"
    assert path.stat().st_ino == ino, "replaced"
    assert not list((tmp_path / "quarantine").rglob(path.name)), "quarantined"


def test_a_file_too_large_for_a_window_is_left_in_a_keep_folder(
    tmp_path: Path, models: Path
) -> None:
    """40 KB for a window of 8 KiB: fits the quarantine (256 MiB), used to be moved there."""
    cfg_path = _keep_config(tmp_path, max_bytes="8KiB")
    cam, out = tmp_path / "in/cam", tmp_path / "out.jsonl"
    agent = _started(cfg_path)
    try:
        big = cam / "big.jpg"
        data = jpeg(90, size=400) + b"\0" * 40_000
        write_atomic(big, data)
        ino = big.stat().st_ino
        wait_for(lambda: len(_errors(out, "cam")) == 1, what="the error event")
        write_atomic(cam / "small.jpg", jpeg(100))  # taken after it: big.jpg was judged
        wait_for(lambda: len(_results(out, "cam")) == 1, what="small.jpg's result")
    finally:
        agent.stop()
    [err] = _errors(out, "cam")
    assert err["item"] == "big.jpg" and err["error_type"] == "FileTooLarge", err
    assert err["quarantined_path"] is None, err
    assert err["message"].endswith(KEPT), err
    _untouched(big, data, ino, tmp_path)
    assert agent.lifecycle.left_in_place == 1 and agent.lifecycle.quarantined == 0
    assert agent.metrics.errors.labels(stage="read")._value.get() == 1


def test_a_csv_without_the_models_named_columns_is_left_in_a_keep_folder(
    tmp_path: Path, models: Path
) -> None:
    """A model mismatch (``ModelSpecError``, as a wrong column count), no bad file."""
    cfg_path = _keep_config(tmp_path, columns=["a", "b", "c"])
    vib, out = tmp_path / "in/vib", tmp_path / "out.jsonl"
    other = b"x,y,z\n" + b"0,0,0\n" * 8
    agent = _started(cfg_path)
    write_atomic(vib / "other.csv", other)
    ino = (vib / "other.csv").stat().st_ino
    try:
        wait_for(lambda: len(_errors(out, "vib")) == 1, what="the error event")
        write_atomic(vib / "good.csv", b"c,b,a\n" + b"1,1,1\n" * 8)
        wait_for(lambda: len(_results(out, "vib")) == 1, what="good.csv's result")
    finally:
        agent.stop()
    [err] = _errors(out, "vib")
    assert err["item"] == "other.csv" and err["error_type"] == "ModelSpecError", err
    assert "lacks the model's columns ['a', 'b', 'c']" in err["message"], err
    assert err["quarantined_path"] is None and "on_done: keep" in err["message"], err
    _untouched(vib / "other.csv", other, ino, tmp_path)
    assert agent.lifecycle.left_in_place == 1 and agent.lifecycle.quarantined == 0
    assert agent.sources["vib"].stats.taken == 2, "other.csv taken again"


def test_a_file_its_model_keeps_failing_on_is_left_in_a_keep_folder(
    tmp_path: Path, models: Path
) -> None:
    """Three failed windows: reported once, left, not taken again (nor after a restart)."""
    cfg_path = _keep_config(tmp_path)
    cam, out = tmp_path / "in/cam", tmp_path / "out.jsonl"
    agent = _started(cfg_path)
    runner = agent.runners["image"]
    runner.session = FailingSession(runner.session, WINDOW_ATTEMPTS)
    data = jpeg(250)
    try:
        write_atomic(cam / "a.jpg", data)
        ino = (cam / "a.jpg").stat().st_ino
        wait_for(
            lambda: any(KEPT in e["message"] for e in _errors(out, "cam")),
            timeout=30,
            what="the event that leaves a.jpg",
        )
        write_atomic(cam / "b.jpg", jpeg(10))  # the model works again: b.jpg scored
        wait_for(lambda: len(_results(out, "cam")) == 1, what="b.jpg's result")
    finally:
        agent.stop()
    errors = _errors(out, "cam")
    assert len(errors) == WINDOW_ATTEMPTS + 1, errors  # one per failed window + the last
    last = errors[-1]
    assert last["item"] == "a.jpg" and last["quarantined_path"] is None, last
    assert last["message"].startswith(f"failed in {WINDOW_ATTEMPTS} windows"), last
    assert last["message"].endswith(KEPT), last
    _untouched(cam / "a.jpg", data, ino, tmp_path)
    assert [r["item"] for r in _results(out, "cam")] == ["b.jpg"]
    assert agent.sources["cam"].stats.taken == WINDOW_ATTEMPTS + 1, "a.jpg taken again"
    assert agent.lifecycle.left_in_place == 1 and agent.lifecycle.quarantined == 0
    assert agent.metrics.errors.labels(stage="window_retries")._value.get() == 1

    # A restart: its first scan finds a.jpg (unchanged) and c.jpg (newer: taken after a.jpg,
    # were that taken again) at once.
    write_atomic(cam / "c.jpg", jpeg(20))
    later = (cam / "a.jpg").stat().st_mtime + 10
    os.utime(cam / "c.jpg", (later, later))
    agent = _started(cfg_path)
    try:
        wait_for(lambda: len(_results(out, "cam")) == 2, what="c.jpg's result")
    finally:
        agent.stop()
    assert agent.sources["cam"].stats.taken == 1, "a.jpg taken again after a restart"
    assert len(_errors(out, "cam")) == WINDOW_ATTEMPTS + 1
    _untouched(cam / "a.jpg", data, ino, tmp_path)
