"""A JSON-lines file cut back by its writer is followed from the cut, not read again.

``output.jsonl`` cuts a batch it could not write back to where it began, and cuts a line
torn by a kill at the next start. The follower had read past the cut and took the shorter
file for a new one: every line already shown was shown again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from helpers.agent_runs import wait_for

from cdml_edge.tail.follow import follow_jsonl


def _line(item: str) -> bytes:
    return (json.dumps({"topic": "cdml/d/cam/result", "payload": {"item": item}}) + "\n").encode()


def _follow(path: Path) -> tuple[list[str], threading.Event, threading.Thread]:
    seen: list[str] = []
    stop = threading.Event()

    def sink(kind: str, source: str | None, payload: dict) -> None:
        seen.append(payload["item"])

    t = threading.Thread(target=follow_jsonl, args=(path, "cdml/d/", sink, stop))
    t.start()
    return seen, stop, t


def test_a_batch_cut_back_is_not_shown_again_and_what_follows_is(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(_line("a") + _line("b"))
    seen, stop, t = _follow(out)
    try:
        wait_for(lambda: seen == ["a", "b"], what="the first lines")
        with open(out, "ab") as fh:
            fh.write(_line("c")[:15])  # a batch cut short by a full disk ...
        time.sleep(0.5)
        os.truncate(out, len(_line("a") + _line("b")))  # ... and cut back by the writer
        time.sleep(0.5)
        with open(out, "ab") as fh:
            fh.write(_line("c") + _line("d"))  # written again once there is room
        wait_for(lambda: seen[-1:] == ["d"], what="the lines after the cut")
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(5)
    assert seen == ["a", "b", "c", "d"]


def test_a_file_truncated_to_nothing_is_read_from_its_start(tmp_path: Path) -> None:
    """``copytruncate`` (logrotate): a new file in the same inode, read whole."""
    out = tmp_path / "out.jsonl"
    out.write_bytes(_line("a") + _line("b"))
    seen, stop, t = _follow(out)
    try:
        wait_for(lambda: seen == ["a", "b"], what="the first lines")
        os.truncate(out, 0)
        time.sleep(0.5)
        with open(out, "ab") as fh:
            fh.write(_line("c"))
        wait_for(lambda: seen[-1:] == ["c"], what="the line after the truncation")
    finally:
        stop.set()
        t.join(5)
    assert seen == ["a", "b", "c"]


def test_a_named_pipe_put_at_the_path_is_never_waited_on(tmp_path: Path) -> None:
    """The file rotated away and a FIFO made at its name: the follower is not stuck in open().

    Before, the reopen blocked until a writer came, and a stop (Ctrl-C) was never seen.
    """
    out = tmp_path / "out.jsonl"
    out.write_bytes(_line("a"))
    seen, stop, t = _follow(out)
    try:
        wait_for(lambda: seen == ["a"], what="the first line")
        os.replace(out, tmp_path / "out.jsonl.1")
        os.mkfifo(out)
        time.sleep(1.0)  # the follower looks at the new file
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()
