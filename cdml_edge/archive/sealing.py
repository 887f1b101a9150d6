"""Cache copies made durable behind their first reader: renamed at once, fsynced by a thread.

A copy written by :func:`sealed_behind` is renamed into place *unsealed* (mode
:data:`UNSEALED`) as soon as its bytes are written, so that its first reader (a first
epoch) starts at once from the page cache. A thread then ``fsync``s it and marks it sealed
(mode :data:`SEALED`, ``fsync`` again, the folder ``fsync``ed): the wait for the disk is no
longer on the reader's path. A copy found unsealed (:func:`is_sealed` false: the machine
went down before its seal, or another process is sealing it now) is not trusted; its cache
makes it again. Where the folder keeps no modes (FAT, a mount showing every file with one
mode: :func:`keeps_modes`), the copy is fsynced before its rename, as every copy was before.

The thread is waited for at interpreter exit (:func:`wait_sealed`, and it is no daemon, so
a multiprocessing child that ends in ``os._exit`` waits for it too), so a short script or
a DataLoader worker does not leave its copy unsealed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from cdml_edge.fsio import TMP_PREFIX, atomic_writer, fsync_dir

log = logging.getLogger(__name__)

UNSEALED = 0o600
"""Mode of a copy renamed into place whose bytes may not be on the disk yet."""
SEALED = 0o644
"""Mode of a copy whose bytes were fsynced before the mode was set."""

# the file (st_dev, st_ino), not its path: a folder named two ways (relative, absolute,
# through a link) is one folder -> the thread sealing it
_pending: dict[tuple[int, int], threading.Thread] = {}
_fds: dict[tuple[int, int], int] = {}  # the file -> the descriptor its seal holds
_lock = threading.Lock()


def is_sealed(path: str | os.PathLike[str]) -> bool:
    """Whether the copy at ``path`` was fsynced (any mode but :data:`UNSEALED`).

    A seal this process has under way for the file at ``path`` is waited for first. In a
    folder that keeps no modes every copy was fsynced before its rename: sealed.
    """
    st = os.stat(path)
    with _lock:
        thread = _pending.get((st.st_dev, st.st_ino))
    if thread is not None:
        thread.join()
    # looked at again either way: a seal that ended between the first look and the lookup
    # is no longer pending, and the first look predates it
    st = os.stat(path)
    if not keeps_modes(Path(path).parent):
        return True
    return stat.S_IMODE(st.st_mode) != UNSEALED


def keeps_modes(folder: str | os.PathLike[str]) -> bool:
    """Whether files in ``folder`` keep both :data:`UNSEALED` and :data:`SEALED` (probed once).

    Not on FAT, nor on a mount that shows every file with one mode (cifs ``file_mode=``,
    vfat ``fmask=``). A folder that cannot be probed (not writable) counts as keeping them.
    """
    return _probed(os.path.realpath(folder))


@functools.lru_cache(maxsize=64)
def _probed(folder: str) -> bool:
    try:
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".mode", dir=folder)
    except OSError:
        return True
    try:
        seen = []
        for mode in (SEALED, UNSEALED):
            os.fchmod(fd, mode)
            seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return seen == [SEALED, UNSEALED]
    except OSError:
        return False
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def sealed_behind(path: Path, tmp_suffix: str) -> Iterator[BinaryIO]:
    """A file that replaces ``path`` atomically when the block succeeds, sealed behind.

    As :func:`~cdml_edge.fsio.atomic_writer`, but renamed before its ``fsync``: a thread
    seals it (see the module).
    """
    if not keeps_modes(path.parent):  # no mode can say it: fsynced before it is renamed
        with atomic_writer(path, tmp_suffix=tmp_suffix) as fh:
            yield fh
        return
    held: list[int] = []
    try:
        with atomic_writer(path, mode=UNSEALED, fsync=False, tmp_suffix=tmp_suffix) as fh:
            yield fh
            fh.flush()
            held.append(os.dup(fh.fileno()))
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    fd = held[0]
    try:
        st = os.fstat(fd)
    except OSError:  # sealed now, before anyone reads it
        _seal(fd, path)
        return
    # not a daemon: a process that leaves without atexit (a multiprocessing child, such as a
    # DataLoader worker, ends in os._exit) still waits for it in threading._shutdown
    key = (st.st_dev, st.st_ino)
    thread = threading.Thread(target=_seal, args=(fd, path, key), name="seal-copy", daemon=False)
    with _lock:  # started before anyone can find it (join() refuses a thread not started)
        _pending[key] = thread
        _fds[key] = fd
        thread.start()


def wait_sealed(timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds in all for the seals under way in this process.

    ``True`` when none is left.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with _lock:
        threads = list(_pending.values())
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _lock:
        return not _pending


def _seal(fd: int, path: Path, key: tuple[int, int] | None = None) -> None:
    try:
        os.fsync(fd)
        with contextlib.suppress(OSError):  # a file system without modes: fsynced is enough
            os.fchmod(fd, SEALED)
            os.fsync(fd)
        fsync_dir(path.parent)
    except OSError as exc:
        log.warning("copy %s not sealed (%s): it will be made again", path, exc)
    finally:
        os.close(fd)
        with _lock:
            if key is not None and _pending.get(key) is threading.current_thread():
                del _pending[key]
                _fds.pop(key, None)


def _forget_in_child() -> None:
    """A forked child has none of the parent's seal threads, and maybe a lock held by one.

    Nor does it need their descriptors, which would hold an evicted copy's disk space for as
    long as the child lives (a persistent DataLoader worker).
    """
    global _lock
    _lock = threading.Lock()
    _pending.clear()
    for key, fd in _fds.items():  # the child's copies of the seals' descriptors: not its own
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == key:  # still that copy's, not a number used again
                os.close(fd)
    _fds.clear()


atexit.register(wait_sealed)
os.register_at_fork(after_in_child=_forget_in_child)
