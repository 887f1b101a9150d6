"""Durable file writes: the one copy of write-temporary, fsync, rename, fsync-the-folder.

:func:`atomic_write` replaces ``path`` with ``data`` so that a reader (or a crash at any
moment) sees either the old file or the whole new one, never half of it. :func:`unique_name`
finds a free name in a folder without overwriting, shortening names that the file system
would refuse as too long.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"
NAME_MAX = 255  # bytes of one path component on Linux file systems


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
    import tempfile

    return tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=folder)


def fit_name(name: str, limit: int = NAME_MAX) -> str:
    """``name`` shortened (keeping its extension) to at most ``limit`` bytes in UTF-8."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= limit:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext.encode("utf-8", "surrogateescape")) > 16:
        stem, ext = name, ""
    keep = limit - (len(ext.encode("utf-8", "surrogateescape")) + 1 if ext else 0)
    short = stem.encode("utf-8", "surrogateescape")[:keep].decode("utf-8", "ignore")
    return f"{short}.{ext}" if ext else short


def unique_name(
    folder: str | os.PathLike[str],
    name: str,
    *,
    exists: Callable[[Path], bool] | None = None,
    attempts: int = 100_000,
) -> Path:
    """A path in ``folder`` for ``name`` that does not exist yet: ``name``, then
    ``stem.1.ext``, ``stem.2.ext``, ...; names too long for the file system are shortened.

    Raises ``FileExistsError`` when no free name is found within ``attempts``.
    """
    base = Path(folder)
    taken = exists or (lambda p: os.path.lexists(p))
    first = fit_name(name)
    if not taken(base / first):
        return base / first
    stem, dot, ext = first.rpartition(".")
    if not dot or not stem:
        stem, ext = first, ""
    for n in range(1, attempts):
        tail = f".{n}.{ext}" if ext else f".{n}"
        cand = fit_name(stem, NAME_MAX - len(tail.encode())) + tail
        if not taken(base / cand):
            return base / cand
    raise FileExistsError(f"{base / name}: no free name for it")


__all__ = ["atomic_write", "atomic_writer", "fit_name", "fsync_dir", "unique_name"]
