"""Copying a file to another file system with its holes kept as holes.

A move across file systems is a copy and a delete. A plain copy writes a sparse file out in
full (a 1.5 GiB file of holes becomes 1.5 GiB of zeros on the other disk);
:func:`copy_keeping_holes` copies only the file's data ranges (``SEEK_DATA`` /
``SEEK_HOLE``) and sets the size, so the copy is as sparse as the original. Where the holes
of a sparse file cannot be found, it refuses (``OSError``) rather than write them out.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

CHUNK = 1 << 20
_SRC_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DST_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def is_sparse(st: os.stat_result) -> bool:
    """Whether the file of ``st`` has holes (fewer blocks allocated than its size needs)."""
    return st.st_blocks * 512 < st.st_size


def copy_keeping_holes(src: Path, dest: Path) -> None:
    """Copy the regular file ``src`` to the new file ``dest``: holes, mode and times kept.

    ``dest`` must not exist; on any failure it is removed. ``OSError`` when ``src`` is not
    a regular file, or is sparse where its holes cannot be found.
    """
    sfd = os.open(src, _SRC_FLAGS)
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(src))
        dfd = os.open(dest, _DST_FLAGS, 0o600)
        try:
            if is_sparse(st):
                _copy_data(sfd, dfd, st.st_size, src)
            else:
                _copy_range(sfd, dfd, 0, st.st_size)
            os.ftruncate(dfd, st.st_size)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode))
        except BaseException:
            os.close(dfd)
            dest.unlink(missing_ok=True)
            raise
        os.close(dfd)
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(sfd)


def _copy_data(sfd: int, dfd: int, size: int, src: Path) -> None:
    """Copy each data range of ``sfd`` (a sparse file) to the same offset of ``dfd``."""
    if not hasattr(os, "SEEK_DATA"):
        raise OSError(errno.EOPNOTSUPP, "sparse file: its holes cannot be found here", str(src))
    pos = 0
    while pos < size:
        try:
            start = os.lseek(sfd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                return
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                raise OSError(
                    exc.errno, "sparse file: its holes cannot be found here", str(src)
                ) from exc
            raise
        end = os.lseek(sfd, start, os.SEEK_HOLE)
        _copy_range(sfd, dfd, start, end)
        pos = end


def _copy_range(sfd: int, dfd: int, start: int, end: int) -> None:
    pos = start
    while pos < end:
        data = os.pread(sfd, min(CHUNK, end - pos), pos)
        if not data:  # shrank meanwhile
            return
        view = memoryview(data)
        while view:
            n = os.pwrite(dfd, view, pos)
            view = view[n:]
            pos += n


__all__ = ["copy_keeping_holes", "is_sparse"]
