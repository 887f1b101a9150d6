"""Members whose names climb out with ``..``: refused under ``labels="folder"``, as documented."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from cdml_edge.data import CDMLStreamDataset
from cdml_edge.data.labels import LabelError, resolve_labels


def _tar(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            t.addfile(info, io.BytesIO(b"jpg"))
    return buf.getvalue()


@pytest.mark.parametrize("bad", ["../x.jpg", "cat/../../etc/x.jpg", "a/../b/c.jpg", "cat/.."])
def test_a_dotdot_member_is_refused_under_folder_labels(bad: str, tmp_path: Path) -> None:
    path = tmp_path / "pets.tar"
    path.write_bytes(_tar(["cat/1.jpg", "dog/2.jpg", bad]))
    with pytest.raises(LabelError, match=r"pets\.tar: member '.*\.\..*': .*not a training item"):
        CDMLStreamDataset(path, is_image=True, labels="folder")


def test_dotdot_members_do_not_matter_to_other_labels(tmp_path: Path) -> None:
    """Without folder labels a ``..`` member is still left out as before (not an item)."""
    path = tmp_path / "pets.tar"
    path.write_bytes(_tar(["cat/1.jpg", "dog/2.jpg", "../x.jpg"]))
    ds = CDMLStreamDataset(path, is_image=True)
    assert ds.names == ["cat/1.jpg", "dog/2.jpg"]


def test_hidden_members_are_still_left_out_under_folder_labels(tmp_path: Path) -> None:
    path = tmp_path / "pets.tar"
    path.write_bytes(_tar(["cat/1.jpg", "dog/2.jpg", ".git/x.jpg", "cat/.1.jpg", "..a/x.jpg"]))
    ds = CDMLStreamDataset(path, is_image=True, labels="folder")
    assert ds.names == ["cat/1.jpg", "dog/2.jpg"] and ds.classes == ["cat", "dog"]


def test_resolve_labels_looks_at_every_archive_member() -> None:
    with pytest.raises(LabelError, match=r"member '\.\./x\.jpg'"):
        resolve_labels("folder", ["cat/1.jpg"], lambda n: b"", ["cat/1.jpg", "../x.jpg"])
