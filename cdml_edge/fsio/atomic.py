"""Durable file writes: the one copy of write-temporary, fsync, rename, fsync-the-folder.

:func:`atomic_write` replaces ``path`` with ``data`` so that a reader (or a crash at any
moment) sees either the old file or the whole new one, never half of it.

Modes: the appliance's own files get the mode they are given (``mode=0o644`` by default,
or the configured one), whatever the umask. A file a user's command writes for the user
(``mode=UMASK``: a replay's results, a training export) gets the mode the user's umask
gives a new file, as ``cp`` or a shell redirect would (:func:`umask_mode`): 0600 under
``umask 077``. :func:`staged_path` does the same for a writer that takes a path and sets
its own mode.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"
UMASK = None
"""``mode=UMASK``: the mode the umask gives a new file (see :func:`umask_mode`)."""


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
    mode: int | None = 0o644,
    fsync: bool = True,
    tmp_suffix: str = ".part",
) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` atomically once the ``with`` block succeeds.

    The data go to a temporary file in the same folder (``.tmp-*``), which is flushed,
    fsynced (unless ``fsync=False``), given ``mode`` and renamed over ``path``; then the
    folder is fsynced. On any error the temporary file is removed and ``path`` is untouched.
    ``mode=UMASK`` (None): the mode the umask gives a new file in that folder.
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
        os.chmod(tmp, umask_mode(folder) if mode is None else mode)
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
    mode: int | None = 0o644,
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


def umask_mode(folder: str | os.PathLike[str]) -> int:
    """The mode a new file created in ``folder`` gets: 0666 narrowed by the umask.

    Found by creating an empty file there (``O_EXCL``, mode 0666) and looking at it, so the
    process umask is never changed (``os.umask`` sets it for every thread while it reads
    it) and a default ACL of the folder narrows it as it would any new file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        probe = os.path.join(folder, f"{TMP_PREFIX}{secrets.token_hex(8)}.mode")
        try:
            fd = os.open(probe, flags, 0o666)
        except FileExistsError:
            continue
        try:
            return stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(probe)
    raise FileExistsError(f"{folder}: no free temporary name")


@contextlib.contextmanager
def staged_path(
    path: str | os.PathLike[str], *, mode: int | None = UMASK, fsync: bool = True
) -> Iterator[Path]:
    """A path to write ``path``'s new file at, for a writer that takes a path.

    The path lies in a private folder (``.tmp-*``, mode 0700) made beside ``path``; once
    the ``with`` block succeeds, the file there gets ``mode`` (``UMASK``: :func:`umask_mode`
    of this process) and is renamed over ``path`` and the folder is fsynced (unless
    ``fsync=False``). Whatever mode the writer
    gave it, nobody else could open it before it took the umask's. On any error nothing
    is left and ``path`` is untouched.
    """
    target = Path(path)
    folder = target.parent
    try:
        stage = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, suffix=".stage", dir=folder))
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        raise type(exc)(exc.errno, exc.strerror, str(folder)) from None
    try:
        staged = stage / target.name
        yield staged
        os.chmod(staged, umask_mode(stage) if mode is None else mode)
        os.replace(staged, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if fsync:
        fsync_dir(folder)


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
