"""How the ring puts files on disk: temporary names, then renames, then the folder fsync.

The ring commits a window as two files (archive, then sidecar) renamed into place only once
both are written, so :func:`cdml_edge.fsio.atomic_write` (one file, renamed at once) does
not fit; :func:`write_file` gives the file its mode exactly (owner-only 0600 unless the
configuration says otherwise), whatever the umask. The folder fsync and the
temporary-name prefix are :mod:`cdml_edge.fsio`'s, so the ring's debris sweep and every
other atomic writer agree on what a temporary file is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from cdml_edge.fsio import TMP_PREFIX, fsync_dir
from cdml_edge.store.sidecar import ring_name


def tmp_path(directory: Path, name: str) -> Path:
    """The temporary name ``name`` is written under before its rename."""
    return directory / f"{TMP_PREFIX}{name}"


def is_tmp_name(name: str) -> bool:
    """Whether ``name`` is the temporary name of one of the ring's own files.

    Such a file is debris of an interrupted write, removed when the ring opens.
    """
    return name.startswith(TMP_PREFIX) and ring_name(name[len(TMP_PREFIX) :]) is not None


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_file(path: Path, data: bytes, *, fsync: bool, mode: int = 0o600) -> None:
    """Create ``path`` anew with ``data`` and ``mode`` (a temporary name of the ring's).

    Whatever had that name is removed first (the entry itself: a link put there is never
    written through, a FIFO never blocks the write). The file is fsynced unless ``fsync``
    is False.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, _WRITE_FLAGS, mode)
    try:
        os.fchmod(fd, mode)  # not narrowed (nor widened) by the umask
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def commit(directory: Path, renames: Sequence[tuple[Path, Path]], *, fsync: bool) -> None:
    """Rename each written temporary file over its target, in order, then fsync the folder."""
    for tmp, target in renames:
        os.replace(tmp, target)
    if fsync:
        fsync_dir(directory)
