"""An archive replaced at its path after the dataset was built is never read with the old index.

``os.replace`` (as ``tar`` and :func:`write_archive` write) puts a new file at the path while
the dataset holds the old one's member index. Forked workers keep reading the old file; a
process that must open the path again (a spawned worker, a reopen after ``close``) refuses
the new file with :class:`ArchiveChangedError` naming the archive.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from helpers.tar_cases import replace_with_tar
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset
from cdml_edge.archive import ArchiveChangedError, ArchiveError, open_archive, write_archive
from cdml_edge.archive.source import FileSource


def _build(path: Path, kind: str, version: int) -> None:
    a, b = (b"A", b"B") if version == 1 else (b"a", b"b")
    members = [("x/a.bin", a * 1000), ("x/b.bin", b * 1000)]
    if version == 2:  # one more member in front: every offset moves
        members.insert(0, ("x/new.bin", b"N" * 1000))
    if kind == "tar":
        replace_with_tar(path, members)
    else:
        tmp = path.with_name("new-" + path.name)
        write_archive(tmp, members)
        os.replace(tmp, path)


def _first(batch: list[bytes]) -> bytes:
    return batch[0][:4]


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_forked_workers_read_the_file_the_index_came_from(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"data.{kind}"
    _build(path, kind, 1)
    ds = CDMLStreamDataset(str(path))
    assert [ds[i][:4] for i in range(len(ds))] == [b"AAAA", b"BBBB"]
    _build(path, kind, 2)
    loader = DataLoader(ds, batch_size=1, num_workers=2, collate_fn=_first)
    assert sorted(loader) == [b"AAAA", b"BBBB"]  # not b"NNNN", b"aaaa", nor a CRC error


def test_spawned_workers_refuse_a_replaced_archive(tmp_path: Path) -> None:
    path = tmp_path / "data.tar"
    _build(path, "tar", 1)
    ds = CDMLStreamDataset(str(path))
    assert ds[0][:4] == b"AAAA"
    _build(path, "tar", 2)
    loader = DataLoader(
        ds, batch_size=1, num_workers=2, collate_fn=list, multiprocessing_context="spawn"
    )
    batches = iter(loader)
    for _ in range(len(ds)):  # one batch each: both workers up and done before shutdown
        with pytest.raises(ArchiveChangedError, match="replaced") as err:
            next(batches)
        assert str(path) in str(err.value)  # the worker's error, re-raised by the loader
    del batches


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_unpickled_archive_refuses_a_replaced_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"data.{kind}"
    _build(path, kind, 1)
    arc = open_archive(path)
    blob = pickle.dumps(arc)
    _build(path, kind, 2)
    with pytest.raises(ArchiveChangedError) as err:
        pickle.loads(blob).read("x/a.bin")
    assert isinstance(err.value, ArchiveError) and str(path) in str(err.value)
    assert arc.read("x/a.bin")[:1] == b"A"  # the open descriptor still reads the old file


def test_archive_on_a_file_object_pickles_as_that_file(tmp_path: Path) -> None:
    path = tmp_path / "data.tar"
    _build(path, "tar", 1)
    with path.open("rb") as fh:
        blob = pickle.dumps(open_archive(fh))
    assert pickle.loads(blob).read("x/a.bin")[:1] == b"A"  # the same file: read
    _build(path, "tar", 2)
    with pytest.raises(ArchiveChangedError):
        pickle.loads(blob).read("x/a.bin")


def test_reopen_after_close_checks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    src = FileSource(path)
    assert src.pread(0, 3) == b"xxx"
    src.close()
    assert src.pread(0, 3) == b"xxx"  # the same file: reopened
    src.close()
    st = path.stat()
    path.write_bytes(b"y" * 100)  # in place, the same size: told by its mtime
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # even on a coarse clock
    with pytest.raises(ArchiveChangedError, match="rebuild the dataset"):
        src.pread(0, 3)


def test_forked_child_checks_when_it_must_open_the_path(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    src = FileSource(path)  # never read here: a child has no descriptor to inherit
    (tmp_path / "g.bin").write_bytes(b"y" * 100)
    os.replace(tmp_path / "g.bin", path)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            src.pread(0, 1)
            code = 1
        except ArchiveChangedError:
            code = 0
        except BaseException:
            code = 2
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"\x00"
