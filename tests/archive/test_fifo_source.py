"""An archive path that names a FIFO is refused at once, never waited on.

``open_archive`` stat'ed the path (a folder was refused by name) and then opened it for
reading: a FIFO (named pipe) blocks that open until a writer comes, so ``open_archive``,
``cdml-edge scan`` or a dataset listing a folder hung for ever on one. A FIFO cannot be read
at random anyway.
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import zipfile
from pathlib import Path

import pytest

from cdml_edge.archive import ArchiveChangedError, UnsupportedArchiveError, open_archive


def _open_within(path: Path, seconds: float = 10.0) -> list[object]:
    got: list[object] = []

    def run() -> None:
        try:
            got.append(open_archive(path))
        except Exception as exc:  # what it raised is the answer
            got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return got


def _release(path: Path) -> None:
    """Let a reader blocked on the FIFO go (it then reads an empty stream)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_is_refused_naming_it(tmp_path: Path, through_link: bool) -> None:
    fifo = tmp_path / "window.zip"
    os.mkfifo(fifo)
    path = fifo
    if through_link:
        path = tmp_path / "link.tar.zst"
        path.symlink_to(fifo)
    try:
        got = _open_within(path)
    finally:
        _release(fifo)
    assert got, "open_archive blocked on a FIFO"
    err = got[0]
    assert isinstance(err, UnsupportedArchiveError), err
    assert err.archive == str(path) and "FIFO" in str(err) and str(path) in str(err)


def test_a_path_replaced_by_a_fifo_is_a_changed_archive(tmp_path: Path) -> None:
    """An unpickled archive opens its path again: a FIFO put there is not waited on."""
    path = tmp_path / "a.zip"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x.txt", b"1")
    path.write_bytes(buf.getvalue())
    with open_archive(path) as arc:
        blob = pickle.dumps(arc)
    path.unlink()
    os.mkfifo(path)
    got: list[object] = []

    def run() -> None:
        try:
            got.append(pickle.loads(blob).read("x.txt"))
        except Exception as exc:  # what it raised is the answer
            got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    _release(path)
    assert got, "reading the unpickled archive blocked on a FIFO"
    assert isinstance(got[0], ArchiveChangedError), got
