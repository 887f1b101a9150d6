"""Review cases of labels from a mapping or a manifest: no label lands on a member at random.

A manifest written beside the class folders (``cat/1.jpg,cat``) labels an archive made of
the folder above them (``pets/cat/1.jpg``); base names repeat across class folders.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.dataset_data import COLOURS, jpeg, write

from cdml_edge.data.labels import LabelError


def _pets(tmp_path: Path, manifest: str | None = None) -> Path:
    """``pets/<class>/<i>.jpg`` (the same base names in every class), solid class colours."""
    items = [
        (f"pets/{cls}/{i}.jpg", jpeg(np.full((8, 8, 3), colour, np.uint8)))
        for cls, colour in COLOURS.items()
        for i in range(3)
    ]
    if manifest is not None:
        items.append(("pets/labels.csv", manifest.encode()))
    return write(tmp_path / "pets.zip", items)


def test_manifest_keys_below_a_wrapping_folder_label_their_own_members(tmp_path: Path) -> None:
    """``cat/1.jpg`` names ``pets/cat/1.jpg``, not the first member called ``1.jpg``."""
    from cdml_edge import CDMLStreamDataset

    rows = [f"{cls}/{i}.jpg,{cls}" for cls in COLOURS for i in range(3)]
    path = _pets(tmp_path, "name,label\n" + "\n".join(rows) + "\n")
    ds = CDMLStreamDataset(path, is_image=True, target_size=8, labels="pets/labels.csv")
    assert len(ds) == 9 and ds.classes == sorted(COLOURS)
    for name, y in ds.samples:
        assert ds.classes[y] == name.split("/")[1]
    folder = CDMLStreamDataset(path, is_image=True, target_size=8, labels="folder")
    assert ds.samples == folder.samples
    as_dict = CDMLStreamDataset(
        path, is_image=True, labels={"dog/2.jpg": "dog", "eel/2.jpg": "eel"}
    )
    assert as_dict.samples == [("pets/dog/2.jpg", 0), ("pets/eel/2.jpg", 1)]


def test_an_ambiguous_key_is_refused(tmp_path: Path) -> None:
    """A base name shared by members of several classes names none of them."""
    from cdml_edge import CDMLStreamDataset

    path = _pets(tmp_path)
    with pytest.raises(LabelError, match=r"'1.jpg', which matches 3 members") as err:
        CDMLStreamDataset(path, is_image=True, labels={"1.jpg": "cat"})
    assert str(path) in str(err.value) and "pets/cat/1.jpg" in str(err.value)
    # a base name held once still works
    unique = write(tmp_path / "u.zip", [("pets/cat/a.jpg", b"x"), ("pets/dog/b.jpg", b"y")])
    ds = CDMLStreamDataset(unique, labels={"a.jpg": 1, "b.jpg": 2})
    assert ds.samples == [("pets/cat/a.jpg", 1), ("pets/dog/b.jpg", 2)]


def test_two_keys_naming_one_member_with_different_labels_are_refused(tmp_path: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    path = write(tmp_path / "one.zip", [("data/x/a.jpg", b"x"), ("data/y/b.jpg", b"y")])
    with pytest.raises(LabelError, match="both name member 'data/x/a.jpg'"):
        CDMLStreamDataset(path, labels={"data/x/a.jpg": "cat", "a.jpg": "dog"})
    same = CDMLStreamDataset(path, labels={"data/x/a.jpg": "cat", "a.jpg": "cat"})
    assert same.samples == [("data/x/a.jpg", 0)]
