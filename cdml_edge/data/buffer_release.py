"""When a pooled buffer's memory is no longer used by any tensor, here or in a forked child.

:func:`watch` calls ``release`` once the storage of a tensor made by ``torch.from_numpy``
over a buffer is freed, whatever views of it were made: ``torch.from_numpy`` keeps the NumPy
array alive exactly as long as the storage's memory is that array's. Two ways the memory
can outlive that moment, and what is done:

* **The storage moved to other memory** (``share_memory_()``, or a tensor put on a
  ``torch.multiprocessing`` queue, copies a private storage into shared memory and drops the
  old memory). A NumPy view made before (``x.numpy()``) still reads the old memory, and it
  keeps the tensor, so the storage, alive: the release waits until the storage itself is
  gone, and the mapping is kept until then.
* **A fork** copies the process's mappings: a child may read a shared buffer its parent
  held (a DataLoader worker too: its dataset is the parent's). Each fork while a shared
  buffer is watched leaves the child the write end of a pipe; the release waits until the
  read end shows that every process holding it (the child, and whatever it forked) is gone.
  A child never releases what it inherited, and keeps its mappings to its end.

Waiting releases are looked at by :func:`sweep`, which runs as buffers are taken and
received.
"""

from __future__ import annotations

import os
import select
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef


class _Fork:
    """The read end of a pipe whose write end a forked child (and its children) holds."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.over = False

    def gone(self) -> bool:
        """Whether every process holding the write end has closed it (ended or exec'd)."""
        if not self.over and self.fd >= 0:
            poll = select.poll()
            poll.register(self.fd, select.POLLIN)
            if poll.poll(0):  # readable, or hung up: no writer is left, nothing is written
                self.over = True
                os.close(self.fd)
        return self.over


_NEVER = _Fork(-1)  # a fork whose pipe could not be made: what it saw is never released


@dataclass
class _Watched:
    storage: StorageWeakRef
    release: Callable[[], None]
    shared: bool
    pid: int = field(default_factory=os.getpid)
    forks: list[_Fork] = field(default_factory=list)
    dropped: bool = False  # the memory is no longer the storage's own

    def over(self) -> bool:
        return self.dropped and self.storage.expired() and all(f.gone() for f in self.forks)


_lock = threading.RLock()  # a collection inside may free a watched array
_watched: dict[int, _Watched] = {}
_next_key = 0


def watch(arr: Any, tensor: torch.Tensor, release: Callable[[], None], shared: bool) -> None:
    """Call ``release`` once no tensor uses ``arr``'s memory any more (``shared``: nor a child).

    ``tensor``: the one ``torch.from_numpy(arr)`` made. ``release`` keeps what must stay
    mapped until then.
    """
    global _next_key
    entry = _Watched(StorageWeakRef(tensor.untyped_storage()), release, shared)
    with _lock:
        key = _next_key = _next_key + 1
        _watched[key] = entry
    weakref.finalize(arr, _dropped, key).atexit = False


def _dropped(key: int) -> None:
    """``arr`` is freed: its storage is gone, or it moved to other memory."""
    with _lock:
        entry = _watched.get(key)
        if entry is None:
            return
        entry.dropped = True
        if entry.pid != os.getpid() or not entry.over():
            return  # inherited, moved, or a child may read it: later (sweep), or never
        del _watched[key]
    entry.release()


def sweep() -> None:
    """Release what waited for a moved storage or a forked child, once they are gone."""
    with _lock:
        pid = os.getpid()
        done = [k for k, e in _watched.items() if e.pid == pid and e.dropped and e.over()]
        releases = [_watched.pop(k).release for k in done]
    for release in releases:
        release()


_pipe_end = -1  # the write end of the fork under way, in the parent until it has forked


def _before_fork() -> None:
    global _pipe_end
    _lock.acquire()  # released on both sides after the fork
    mine = [e for e in _watched.values() if e.shared and e.pid == os.getpid()]
    if not mine:
        return
    try:
        read_end, _pipe_end = os.pipe2(os.O_CLOEXEC)  # exec drops the mappings, and this end
        fork = _Fork(read_end)
    except OSError:  # out of descriptors: keep all of it for good
        fork = _NEVER
    for entry in mine:
        entry.forks.append(fork)


def _after_in_parent() -> None:
    global _pipe_end
    if _pipe_end >= 0:
        os.close(_pipe_end)
        _pipe_end = -1
    _lock.release()


def _after_in_child() -> None:
    global _lock, _pipe_end
    _lock = threading.RLock()  # another thread may have held it at the fork
    _pipe_end = -1  # kept open: the parent sees this process end
    for entry in _watched.values():  # inherited: never released here, mapped to the end
        for fork in entry.forks:
            if not fork.over and fork.fd >= 0:
                os.close(fork.fd)  # the parent's read ends are no business of this process
                fork.over = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
