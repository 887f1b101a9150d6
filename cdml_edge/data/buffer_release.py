"""When a pooled buffer's memory is no longer used by any tensor of this process.

:func:`watch` calls ``release`` once the storage of a tensor made by ``torch.from_numpy``
over a buffer is freed, whatever views of it were made: ``torch.from_numpy`` keeps the NumPy
array alive exactly as long as the storage's memory is that array's.

Two ways the memory can outlive that moment, and what is done:

* **The storage moved to other memory** (``share_memory_()``, or a tensor put on a
  ``torch.multiprocessing`` queue, copies a private storage into shared memory and drops the
  old memory). A NumPy view made before (``x.numpy()``) still reads the old memory, and it
  keeps the tensor, so the storage, alive: the release waits until the storage itself is
  gone (:func:`sweep`, run as buffers are taken or received).
* **A fork** copies the process's mappings, shared ones included: a child may read what its
  parent held. A buffer watched at a fork is never released (the pool takes others), except
  at the forks that start DataLoader workers, which run only the worker loop.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_lock = threading.RLock()  # a collection inside may free a watched array
_live: dict[int, weakref.finalize[Any, Any]] = {}  # watched, memory still in use
_moved: dict[int, tuple[StorageWeakRef, Callable[[], None]]] = {}  # storage moved on
_next_key = 0


def watch(arr: Any, tensor: torch.Tensor, release: Callable[[], None]) -> None:
    """Call ``release`` once no storage of this process uses ``arr``'s memory any more."""
    global _next_key
    storage = StorageWeakRef(tensor.untyped_storage())
    with _lock:
        key = _next_key = _next_key + 1
        done = weakref.finalize(arr, _dropped, key, storage, release, os.getpid())
        done.atexit = False
        _live[key] = done


def _dropped(key: int, storage: StorageWeakRef, release: Callable[[], None], pid: int) -> None:
    """``arr`` is freed: its storage is gone, or it moved to other memory."""
    if os.getpid() != pid:
        return
    with _lock:
        if _live.pop(key, None) is None:
            return  # watched at a fork: never released
        if not storage.expired():
            _moved[key] = (storage, release)  # views made before the move may read it
            return
    release()


def sweep() -> None:
    """Release what was kept for a storage that moved on, once that storage is gone."""
    with _lock:
        gone = [k for k, (storage, _) in _moved.items() if storage.expired()]
        releases = [_moved.pop(k)[1] for k in gone]
    for release in releases:
        release()


def _retire_at_fork() -> None:
    """Before a fork: what is watched now is never released (the child may read it)."""
    if starts_dataloader_worker():
        return
    with _lock:
        for done in list(_live.values()):
            done.detach()
        _live.clear()
        _moved.clear()


def starts_dataloader_worker() -> bool:
    """Whether the fork under way starts a DataLoader worker (PyTorch's loader is calling)."""
    loader = os.path.join("torch", "utils", "data", "dataloader.py")
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(loader):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _forget_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # another thread may have held it at the fork
    _live.clear()
    _moved.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_retire_at_fork, after_in_child=_forget_in_child)
