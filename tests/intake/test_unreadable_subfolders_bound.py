"""Past its bound of remembered unreadable subfolders, none is forgotten, none reported twice.

The oldest one was forgotten to make room: once readable again it got no event and no
rescan (its files were never taken), and each rescan reported every subfolder again, as the
forgotten ones came back and pushed others out. Past the bound they are now counted, not
remembered, and the tree is rescanned every ``OVERFLOW_RESCAN_S`` while any is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdml_edge.intake import subfolders
from cdml_edge.intake.subfolders import UnreadableSubfolders


def test_past_the_bound_nothing_remembered_is_pushed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subfolders, "MAX_UNREADABLE_DIRS", 2)
    monkeypatch.setattr(subfolders, "OVERFLOW_RESCAN_S", 0.0)
    subs = UnreadableSubfolders(tmp_path)
    a, b, c = (str(tmp_path / n) for n in "abc")
    assert subs.add(a, "Permission denied") and subs.add(b, "Permission denied")
    assert not subs.add(c, "Permission denied")  # past the bound: not reported one by one
    assert a in subs and b in subs and c not in subs and subs.beyond
    assert not subs.add(a, "Permission denied")  # a rescan finding it again: no new report
    said = subs.describe()
    assert said is not None and "b, more past 2" in said and "rescan of the tree" in said
    assert subs.overflow_rescan_due()  # the rescan that finds those past the bound
    subs.walk_started()
    assert not subs.overflow_rescan_due() and not subs.beyond  # none found past it yet
    assert not subs.add(c, "Permission denied") and subs.overflow_rescan_due()


def test_below_the_bound_no_rescan_is_due(tmp_path: Path) -> None:
    subs = UnreadableSubfolders(tmp_path)
    assert subs.add(str(tmp_path / "a"), "Permission denied")
    assert not subs.beyond and not subs.overflow_rescan_due()
