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
  held (a DataLoader worker too: its dataset is the parent's). Each fork leaves the child
  the write end of a pipe, and the child writes its process id into a shared word. A
  shared buffer watched at the fork waits until no process holds the write end any more
  (the child and what it forked have ended or exec'd) and the child maps no pool buffer
  (``/proc/<pid>/maps``: a child that closed its descriptors, as a daemon does, still
  counts). A child never releases what it inherited, and keeps it mapped. Not followed: a
  grandchild that closed every inherited descriptor after its parent, the child, ended.

Waiting releases are looked at by :func:`sweep`, which runs as buffers are taken and
received, and before each fork: what waited for a child that has ended since is released
then, and the new child inherits none of it (its mapping, its descriptor). Each thread's
forks under way are its own (another thread's fork may run its hooks between this one's
``fork()`` and its after-hooks). A child makes the module's lock anew: another thread, or a
fork from a collection inside a sweep, may hold it at the fork.
"""

from __future__ import annotations

import errno
import mmap
import os
import select
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_ENDED = select.POLLIN | select.POLLHUP  # nothing is ever written: either means no writer
MEMFD_NAME = b"cdml-edge-batch"  # the name of the pool's shared buffers, as /proc shows it


class _Fork:
    """A forked child, seen from its parent.

    The read end of a pipe whose write end it (and its children) holds, and a shared word
    where it wrote its process id.
    """

    def __init__(self, fd: int, box: mmap.mmap | None) -> None:
        self.fd = fd
        self.box = box
        self.owner = os.getpid()
        self.over = False

    def gone(self) -> bool:
        """Whether no process holds the write end and the child maps no buffer any more."""
        if self.over or self.fd < 0 or os.getpid() != self.owner:
            return self.over
        poll = select.poll()
        poll.register(self.fd, select.POLLIN)
        events = poll.poll(0)
        if self.over or not events or not events[0][1] & _ENDED:
            return self.over  # still held (or closed meanwhile by a fork's child)
        child = int.from_bytes(self.box[:8], "little") if self.box is not None else 0
        if child and _maps_buffers(child):
            return False  # it closed its descriptors (a daemon does) but still maps them
        if self.over or os.getpid() != self.owner:
            return self.over  # a fork under a collection above: this is its child now
        self.over = True
        os.close(self.fd)
        return True


def _maps_buffers(pid: int) -> bool:
    """Whether process ``pid`` still maps a pool buffer (not once it ended or exec'd)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return MEMFD_NAME in f.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: whether it runs
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError as e:
            return e.errno == errno.EPERM
        return True


_NEVER = _Fork(-1, None)  # a fork whose pipe could not be made: what it saw is never released


@dataclass
class _Watched:
    storage: StorageWeakRef
    release: Callable[[], None]
    shared: bool
    pid: int = field(default_factory=os.getpid)
    forks: list[_Fork] = field(default_factory=list)
    dropped: bool = False  # the memory is no longer the storage's own

    def prune(self) -> bool:
        """Forget the ended forks; whether none is left."""
        self.forks = [f for f in self.forks if not f.gone()]
        return not self.forks

    def over(self) -> bool:
        return self.dropped and self.storage.expired() and self.prune()


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
        _watched.pop(key, None)
    _release(entry)


def _release(entry: _Watched) -> None:
    if entry.pid == os.getpid():  # a fork inside may have made this a child since
        entry.release()


def sweep() -> None:
    """Release what waited for a moved storage or a forked child, once they are gone."""
    with _lock:
        done: list[_Watched] = []
        for key in list(_watched):  # no allocation while it iterates: no collection there
            entry = _watched.get(key)  # (one may drop entries meanwhile)
            if entry is None or entry.pid != os.getpid() or not entry.over():
                continue
            if _watched.pop(key, None) is not None:
                done.append(entry)
    for entry in done:
        _release(entry)


_UnderWay = tuple[int, int, "mmap.mmap | None"]  # a fork being made: read end, write end, box
_under_way: dict[int, list[_UnderWay]] = {}  # per thread (its own only), innermost last
_NONE_UNDER_WAY: _UnderWay = (-1, -1, None)


def _before_fork() -> None:
    try:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)  # exec drops the mappings, and this end
    except OSError:  # out of descriptors: what is watched now is kept for good
        read_end = write_end = -1
    box = mmap.mmap(-1, 8) if read_end >= 0 else None  # shared: the child writes its id
    _under_way.setdefault(threading.get_ident(), []).append((read_end, write_end, box))
    sweep()  # what waited for an ended child: released, so the new child inherits none of it


def _this_threads_fork() -> _UnderWay:
    """The fork this thread is making (its innermost), taken off the list.

    Per thread: another thread's fork made meanwhile (its hooks run between this thread's
    fork and its after-hooks) must not take this one's pipe, whose write end only this
    fork's child holds.
    """
    me = threading.get_ident()
    stack = _under_way.get(me)
    if not stack:
        return _NONE_UNDER_WAY  # its before-hook failed: what is watched is kept for good
    taken = stack.pop()
    if not stack:
        del _under_way[me]
    return taken


def _after_in_parent() -> None:
    read_end, write_end, box = _this_threads_fork()
    if write_end >= 0:
        os.close(write_end)
    fork = _Fork(read_end, box) if read_end >= 0 else _NEVER
    with _lock:
        mine = [e for e in list(_watched.values()) if e.shared and e.pid == os.getpid()]
        for entry in mine:
            entry.prune()
            entry.forks.append(fork)
    if not mine and read_end >= 0:
        os.close(read_end)


def _after_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # another thread may have held it at the fork
    read_end, _, box = _this_threads_fork()
    if box is not None:
        os.close(read_end)  # the write end stays open: its end tells the parent
        box[:8] = os.getpid().to_bytes(8, "little")
    _forget_other_forks()
    for entry in list(_watched.values()):  # inherited: never released, mapped to the end
        for fork in entry.forks:
            if not fork.over and fork.fd >= 0:
                fork.over = True
                os.close(fork.fd)  # the parent's read ends are no business of this process


def _forget_other_forks() -> None:
    """In a child: the pipes of the other forks under way are no business of this process.

    Other threads' (they do not run here) are closed and forgotten. This thread's outer
    ones (a fork inside a fork's hooks) are closed and kept as failed, so their after-hooks,
    which run here too, keep what is watched for good.
    """
    me = threading.get_ident()
    for thread, stack in list(_under_way.items()):
        for read_end, write_end, _ in stack:
            for fd in (read_end, write_end):
                if fd >= 0:
                    os.close(fd)
        if thread == me:
            _under_way[me] = [_NONE_UNDER_WAY] * len(stack)
        else:
            del _under_way[thread]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
