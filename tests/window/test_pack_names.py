"""Item names that are not valid UTF-8 (a library user's own ``Item``): packed as ``%XX``.

``Item.name`` is documented as valid UTF-8 and every source of ours makes it so; a window
built by hand with a name carrying a lone surrogate (``os.fsdecode`` of a byte that is not
UTF-8) made ``pack_window`` raise ``UnicodeEncodeError`` from the archive writer.
"""

from __future__ import annotations

import os

from cdml_edge.archive import open_archive
from cdml_edge.window.items import Item, Window
from cdml_edge.window.pack import member_names, pack_window


def test_a_name_with_a_lone_surrogate_is_packed_with_percent_escapes() -> None:
    raw = os.fsdecode(b"cam-\xff.jpg")
    items = [
        Item("cam", raw, "image", 0.0, b"abc", "id1"),
        Item("cam", "ok.jpg", "image", 0.0, b"d", "id2"),
    ]
    w = Window("w1", "cam", 0.0, items, 1.0)
    packed = pack_window(w, device="d", modality="image")
    arc = open_archive(packed.archive)
    assert [m.member for m in packed.manifest.items] == ["cam-%FF.jpg", "ok.jpg"]
    assert arc.read("cam-%FF.jpg") == b"abc"


def test_two_names_shown_alike_stay_two_members() -> None:
    items = [
        Item("cam", os.fsdecode(b"a\xff"), "image", 0.0, b"1", "id1"),
        Item("cam", "a%FF", "image", 0.0, b"2", "id2"),
    ]
    assert member_names([it.name for it in items]) == ["a%FF", "a%FF.1"]
