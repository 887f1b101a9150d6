"""The watched folder removed or moved: two plain lines, no traceback.

Before, the expected, typed ``WatchLost`` came with about eight lines of Python traceback
at ERROR, and the folder was made again without a word.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.supervisor import Supervisor


def test_a_lost_watch_is_one_line_and_the_folder_made_again_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    taken: list[str] = []
    sup = Supervisor(backoff_min=0.05, backoff_max=0.2)
    spec = FolderSpec(name="cam", path=inbox, modality="image", patterns=("*.jpg",))
    src = FolderSource(
        spec,
        ByteBudget(10**8),
        lambda item: taken.append(item.name),
        lambda *a: None,
        spawn=sup.spawn,
    )
    caplog.set_level(logging.WARNING)
    src.start()
    try:
        (inbox / "a.jpg").write_bytes(jpeg(1))
        wait_for(lambda: "a.jpg" in taken, what="first file")
        shutil.move(inbox, tmp_path / "in.old")  # an operator moves it away
        wait_for(lambda: sup.restarts.get("src-cam", 0) >= 1, what="the watch restarted")
        wait_for(inbox.is_dir, what="folder made again")
    finally:
        src.stop()
        sup.close()
    died = [r for r in caplog.records if "src-cam died: WatchLost" in r.getMessage()]
    assert died and all(r.exc_info is None for r in died), [r.exc_info for r in died]
    made = [r for r in caplog.records if "made the folder" in r.getMessage()]
    assert len(made) == 1 and str(inbox) in made[0].getMessage()


def test_an_unexpected_error_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    sup = Supervisor(backoff_min=0.05, backoff_max=0.2)
    calls = []

    def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")

    caplog.set_level(logging.ERROR)
    sup.spawn("w", work).start()
    wait_for(lambda: len(calls) >= 2, what="the restart")
    sup.close()
    died = [r for r in caplog.records if "w died: RuntimeError" in r.getMessage()]
    assert died and died[0].exc_info is not None
