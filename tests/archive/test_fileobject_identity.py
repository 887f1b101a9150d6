"""An archive opened on a file object pickles as the file it was opened on.

The identity (device, inode, size, mtime) is taken when the archive is opened, not when it
is pickled: a file put in place at the path between the two is refused in the receiving
process, never read with the old file's member index.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from helpers.tar_cases import replace_with_tar

from cdml_edge.archive import ArchiveChangedError, open_archive


class _Wrapper:
    """A file object with a name and no usable descriptor (a wrapper class)."""

    def __init__(self, path: Path) -> None:
        self.f = path.open("rb")
        self.name = str(path)

    def read(self, n: int = -1) -> bytes:
        return self.f.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()


@pytest.mark.parametrize("wrapped", [True, False], ids=["no-fileno", "file"])
def test_a_file_replaced_before_pickling_is_refused(tmp_path: Path, wrapped: bool) -> None:
    path = tmp_path / "x.tar"
    replace_with_tar(path, [("a.bin", b"A" * 1000), ("b.bin", b"B" * 1000)])
    fileobj = _Wrapper(path) if wrapped else path.open("rb")
    arc = open_archive(fileobj)
    assert arc.read("a.bin") == b"A" * 1000
    replace_with_tar(path, [("n.bin", b"N" * 1000), ("a.bin", b"a" * 1000), ("b.bin", b"b" * 1000)])
    again = pickle.loads(pickle.dumps(arc))  # after the replacement
    with pytest.raises(ArchiveChangedError):
        again.read("a.bin")
    assert arc.read("a.bin") == b"A" * 1000 or wrapped  # the caller's object: the old file
    fileobj.f.close() if wrapped else fileobj.close()  # type: ignore[union-attr]


def test_an_unchanged_file_object_archive_pickles(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    replace_with_tar(path, [("a.bin", b"A" * 1000)])
    fileobj = _Wrapper(path)
    arc = open_archive(fileobj)
    assert pickle.loads(pickle.dumps(arc)).read("a.bin") == b"A" * 1000
    fileobj.f.close()
