"""A worker's pooled batch sent to the main process as the buffer's descriptor, not copied.

:func:`hand_over` marks a batch that leaves a DataLoader worker (:class:`PooledBatch`).
Multiprocessing's pickler (what the DataLoader's queues use) sends it as the buffer's
descriptor with the tensor's shape, strides and offset; the main process maps the buffer
(:func:`rebuild`) and counts a release in it once its tensor's memory is over
(:mod:`cdml_edge.data.buffer_release`), after which the worker may take the buffer again.
Any other pickling (``torch.save``, ``pickle.dumps``, a deep copy) sees a plain tensor.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import reduce_tensor

from cdml_edge.data import buffer_release
from cdml_edge.data.batch_pool import (
    HEADER,
    RELEASED,
    SENT,
    Slot,
    in_worker,
    numpy_dtype,
    pool,
)
from cdml_edge.data.marked_tensor import MarkedTensor


class PooledBatch(MarkedTensor):
    """A worker's batch over a shared pool buffer; a plain tensor to anything but a queue."""

    _slot: Slot


def hand_over(images: torch.Tensor) -> torch.Tensor:
    """``images`` as it leaves a worker: a :class:`PooledBatch` if it is a pool buffer."""
    slot = pool().slot_of(images) if in_worker() else None
    if slot is None:
        return images
    batch = images.as_subclass(PooledBatch)
    batch._slot = slot
    return batch


def _reduce_pooled(batch: PooledBatch) -> Any:
    """Multiprocessing's pickling of a :class:`PooledBatch`: the descriptor, or as PyTorch."""
    slot = batch._slot
    plain = batch.as_subclass(torch.Tensor)
    storage = plain.untyped_storage()
    if storage.data_ptr() != slot.address or storage.nbytes() != slot.nbytes:
        return reduce_tensor(plain)  # set_() to other memory since: PyTorch's own path
    dtype = str(numpy_dtype(plain.dtype))
    slot.counters[SENT] += 1  # before it leaves: the buffer stays taken until released
    layout = (tuple(plain.shape), plain.stride(), plain.storage_offset())
    return rebuild, (DupFd(slot.fd), slot.size, slot.nbytes, dtype, layout)


ForkingPickler.register(PooledBatch, _reduce_pooled)

_count_lock = threading.Lock()


def rebuild(
    fd: Any, size: int, nbytes: int, dtype: str, layout: tuple[tuple[int, ...], Any, int]
) -> torch.Tensor:
    """The receiving side of :class:`PooledBatch`: the buffer mapped, released when over."""
    fileno = fd.detach()
    try:
        mm = mmap.mmap(fileno, size)
    finally:
        os.close(fileno)
    counters = np.frombuffer(mm, np.uint64, 3, size - HEADER)
    np_dtype = np.dtype(dtype)
    arr = np.frombuffer(mm, np_dtype, nbytes // np_dtype.itemsize)
    flat = torch.from_numpy(arr)
    buffer_release.watch(arr, flat, functools.partial(_count_release, counters), shared=True)
    buffer_release.sweep()
    shape, stride, offset = layout
    return flat.as_strided(shape, stride, offset)


def _count_release(counters: np.ndarray) -> None:
    with _count_lock:
        counters[RELEASED] += 1


def _new_count_lock() -> None:
    global _count_lock
    _count_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_count_lock)
