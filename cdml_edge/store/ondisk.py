"""Reading what the ring finds on its disk without trusting it.

Everything under the retention folder may have been put there by someone else (a ring copied
with ``rsync -a`` keeps links and FIFOs). :func:`read_regular` opens with ``O_NOFOLLOW |
O_NONBLOCK`` and reads only a regular file whose ``fstat`` size is within its bound (a link,
a FIFO or a device is never read, so nothing blocks or reads without end);
:func:`regular_size` judges an entry by its ``lstat``; :func:`open_subdir` opens a folder of
the ring only if it is a real folder (never a link to one elsewhere), so what is listed and
unlinked through its descriptor stays inside the ring.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cdml_edge.errors import CdmlError
from cdml_edge.fsio.kinds import kind_of

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
)


class RetentionError(CdmlError):
    """A retained window or ring entry that cannot be used; names the file."""

    def __init__(self, file: str | Path, reason: str) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = str(file)
        self.reason = reason


def regular_size(path: str | Path) -> int:
    """The size of the regular file at ``path`` (never through a link).

    :class:`RetentionError` when it is anything else or cannot be looked at.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RetentionError(path, f"cannot stat: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise RetentionError(path, f"{kind_of(st.st_mode)}, not a regular file: never opened")
    return st.st_size


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    A link, FIFO, device or socket is refused without reading (a FIFO swapped in at the last
    moment is opened non-blocking and refused by its ``fstat``); so is a file larger than
    ``limit`` bytes. :class:`RetentionError` names the file and the reason.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RetentionError(path, "a symbolic link: never followed") from exc
        raise RetentionError(path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RetentionError(path, f"{kind_of(st.st_mode)}, not a regular file: never read")
        if st.st_size > limit:
            raise RetentionError(path, f"{st.st_size} bytes, over the bound of {limit}")
        want = min(st.st_size, limit) + 1  # a buffer of the file's size, not of the bound
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(want)
            if len(data) == want <= limit:  # grew since its fstat: read on, to the bound
                data += fh.read(limit + 1 - want)
    except OSError as exc:
        raise RetentionError(path, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RetentionError(path, f"grew past the bound of {limit} bytes while read")
    return data


def open_subdir(path: str | Path) -> int | None:
    """A descriptor of the real folder ``path``; None when it does not exist.

    :class:`RetentionError` when ``path`` is a link (to a folder or not) or not a folder.
    """
    try:
        return os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                what = kind_of(os.lstat(path).st_mode)
            except OSError:
                what = "not a folder"
            raise RetentionError(path, f"{what}, not a folder of the ring: never used") from exc
        raise RetentionError(path, f"cannot open: {exc.strerror or exc}") from exc


__all__ = ["RetentionError", "kind_of", "open_subdir", "read_regular", "regular_size"]
