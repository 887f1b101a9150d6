"""The paths denied in a folder are kept with it, bounded (see :mod:`~.subfolders`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdml_edge.intake import subfolders
from cdml_edge.intake.subfolders import UnreadableSubfolders


def test_denied_paths_are_kept_with_their_folder_once() -> None:
    subs = UnreadableSubfolders(Path("/top"))
    subs.suspect("/top/a", "/top/a/1.txt")
    subs.suspect("/top/a")  # a folder event: no path
    subs.suspect("/top/a", "/top/a/2.txt")
    subs.suspect("/top/a", "/top/a/1.txt")  # kept once
    subs.suspect("/top/b")
    assert subs.suspects() == (
        [("/top/a", ["/top/a/1.txt", "/top/a/2.txt"]), ("/top/b", [])],
        False,
    )
    assert subs.suspects() == ([], False)  # forgotten once asked


def test_past_the_bound_paths_are_counted_and_a_rescan_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subfolders, "MAX_DENIED", 3)
    subs = UnreadableSubfolders(Path("/top"))
    for i in range(5):
        subs.suspect("/top/a", f"/top/a/{i}.txt")
    folders, past = subs.suspects()
    assert folders == [("/top/a", [f"/top/a/{i}.txt" for i in range(3)])]
    assert past and subs.denied_dropped == 2
    subs.suspect("/top/a", "/top/a/9.txt")  # room again once asked
    assert subs.suspects() == ([("/top/a", ["/top/a/9.txt"])], False)
