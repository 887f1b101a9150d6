"""Durable file writes: the one copy of write-temporary, fsync, rename, fsync-the-folder.

:func:`atomic_write` replaces ``path`` with ``data`` so that a reader (or a crash at any
moment) sees either the old file or the whole new one, never half of it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """fsync a folder, so that a rename or a new file in it survives a power cut."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str],
    *,
    mode: int = 0o644,
    fsync: bool = True,
    tmp_suffix: str = ".part",
) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` atomically once the ``with`` block succeeds.

    The data go to a temporary file in the same folder (``.tmp-*``), which is flushed,
    fsynced (unless ``fsync=False``), given ``mode`` and renamed over ``path``; then the
    folder is fsynced. On any error the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    folder = target.parent
    fd, tmp = _mkstemp(folder, tmp_suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(folder)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    mode: int = 0o644,
    fsync: bool = True,
) -> int:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_writer`); the byte count."""
    with atomic_writer(path, mode=mode, fsync=fsync) as fh:
        fh.write(data)
    return len(data)


def _mkstemp(folder: Path, suffix: str) -> tuple[int, str]:
    """A temporary file in ``folder``; an error that is the folder's names the folder.

    (Not the random temporary name, which the user never chose.)
    """
    try:
        return tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=folder)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        raise type(exc)(exc.errno, exc.strerror, str(folder)) from None


def folder_mode(file_mode: int) -> int:
    """The mode of a folder holding files of ``file_mode``: ``x`` wherever ``r`` is set."""
    return file_mode | ((file_mode & 0o444) >> 2)


def make_folder(folder: Path, mode: int) -> None:
    """Make ``folder`` (and missing parents) with ``mode`` (not narrowed by the umask).

    An existing one is left as it is.
    """
    if folder.is_dir():
        return
    make_folder(folder.parent, mode)
    try:
        folder.mkdir(mode=mode)
    except FileExistsError:
        return
    os.chmod(folder, mode)
