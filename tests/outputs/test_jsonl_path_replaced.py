"""The JSON-lines output when its file's path comes to name a folder.

The output writes on in the file it has open (nothing is lost) and cannot follow the path:
that is said once per episode, not on every batch, and said again after the path named a
file in between; every batch that could not follow it is counted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.window.topics import OutMessage


def _msg(i: int) -> OutMessage:
    return OutMessage("cam1/result", json.dumps({"id": f"r{i:06d}"}).encode())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "cdml_edge.outputs.jsonl" and r.levelno >= logging.WARNING
    ]


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["payload"]["id"] for line in path.read_bytes().splitlines()]


def test_a_path_replaced_by_a_folder_is_warned_of_once_per_episode_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "out.jsonl"
    out = JsonlOutput(path, fsync=False)
    out.start()
    caplog.set_level(logging.INFO, logger="cdml_edge.outputs.jsonl")
    try:
        out.publish_batch([_msg(0)])
        path.rename(tmp_path / "old.jsonl")
        path.mkdir()  # the path names a folder now
        for i in range(1, 6):
            out.publish_batch([_msg(i)])
        assert len(_warnings(caplog)) == 1, _warnings(caplog)
        assert out.stats()["reopen_failed"] == 5
        assert _ids(tmp_path / "old.jsonl") == [f"r{i:06d}" for i in range(6)]  # not lost
        path.rmdir()
        out.publish_batch([_msg(6)])  # a new file at the path: the episode is over
        assert _ids(path) == ["r000006"]
        path.rename(tmp_path / "old2.jsonl")
        path.mkdir()
        for i in range(7, 10):
            out.publish_batch([_msg(i)])
        assert len(_warnings(caplog)) == 2, _warnings(caplog)  # a new episode
        assert out.stats()["reopen_failed"] == 8
    finally:
        out.stop()
