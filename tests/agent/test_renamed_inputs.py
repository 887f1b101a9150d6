"""The whole agent and a writer that renames its file after the agent took it.

The writer's temporary name is one the source takes (``patterns`` match it). The file is
taken on its close-write and renamed while its window is still open (the window closes on
its second item, written after the rename): one result, and ``on_done`` acts on the file
under its new name. Real folders, the direct inotify reader and watchdog's observers, real
ONNX models, the real JSON-lines output.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_config

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.intake import FolderSource, inotify


@pytest.mark.parametrize("watch", ["inotify", "watchdog"])
@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_file_renamed_in_flight_gives_one_result_and_is_finished_where_it_is(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch, watch: str, on_done: str
) -> None:
    if watch == "watchdog":
        monkeypatch.setattr(inotify, "available", lambda: False)
    elif not inotify.available():
        pytest.skip("inotify is Linux's")
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"][0].update(
        patterns=["*.jpg", "*.writing"],
        window={"seconds": "30s", "max_items": 2, "close_when_idle": False},  # closed by item 2
        on_done=on_done,
        move_to="done/cam",
    )
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    out = tmp_path / "out.jsonl"
    try:
        src = agent.sources["cam"]
        assert isinstance(src, FolderSource)
        (cam / "frame.writing").write_bytes(jpeg(120))
        wait_for(lambda: src.stats.taken == 1, what="the file taken under its temporary name")
        os.rename(cam / "frame.writing", cam / "frame.jpg")
        wait_for(
            lambda: getattr(src.stats, "renamed", 0) == 1 or src.stats.taken > 1,
            what="the rename judged",
        )
        (cam / "after.jpg").write_bytes(jpeg(30))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) >= 2, what="two results")
        results = of_kind(read_jsonl(out), "/result")
        assert sorted(r["item"] for r in results) == ["after.jpg", "frame.writing"]
        wait_for(lambda: not any(cam.iterdir()), what="on_done done with every file")
    finally:
        agent.stop()
    assert len(of_kind(read_jsonl(out), "/result")) == 2
    assert src.stats.taken == 2 and src.stats.renamed == 1
    if on_done == "move":
        assert sorted(p.name for p in (tmp_path / "done/cam").iterdir()) == [
            "after.jpg",
            "frame.jpg",  # moved under the name it has now
        ]
        assert (tmp_path / "done/cam/frame.jpg").read_bytes() == jpeg(120)
