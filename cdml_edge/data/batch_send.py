"""A worker's pooled batch sent to the main process as the buffer's descriptor, not copied.

:func:`hand_over` marks a batch that leaves a DataLoader worker (:class:`PooledBatch`).
Multiprocessing's pickler (what the DataLoader's queues use) sends it as the buffer's
descriptor with the tensor's shape, strides and offset; the main process maps the buffer
(:func:`rebuild`) and counts a release in it once its tensor's memory is over
(:mod:`cdml_edge.data.buffer_release`), after which the worker may take the buffer again.
The main process keeps the mapping for the buffer's next batch, which then comes without
a descriptor (:mod:`cdml_edge.data.kept_mappings`). Any other pickling (``torch.save``,
``pickle.dumps``, a deep copy) sees a plain tensor.
"""

from __future__ import annotations

import functools
import os
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import reduce_tensor

from cdml_edge.data import buffer_release
from cdml_edge.data.batch_pool import (
    COUNTERS,
    HEADER,
    IDENT,
    KEPT,
    RELEASED,
    SENT,
    Slot,
    in_worker,
    numpy_dtype,
    pool,
    random_word,
)
from cdml_edge.data.kept_mappings import Sender, kept_mappings
from cdml_edge.data.marked_tensor import MarkedTensor
from cdml_edge.data.shared_mapping import Mapping, map_shared


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
    """Multiprocessing's pickling of a :class:`PooledBatch`: the buffer, or as PyTorch.

    The buffer's descriptor goes along unless the receiver keeps the buffer mapped
    (:mod:`cdml_edge.data.kept_mappings`); its identity, this process and the descriptor's
    number always do.
    """
    slot = batch._slot
    plain = batch.as_subclass(torch.Tensor)
    storage = plain.untyped_storage()
    if storage.data_ptr() != slot.address or storage.nbytes() != slot.nbytes:
        return reduce_tensor(plain)  # set_() to other memory since: PyTorch's own path
    dtype = str(numpy_dtype(plain.dtype))
    slot.counters[SENT] += 1  # before it leaves: the buffer stays taken until released
    layout = (tuple(plain.shape), plain.stride(), plain.storage_offset())
    fd = None if slot.counters[KEPT] else DupFd(slot.fd)
    sender = (os.getpid(), _PROCESS_WORD)
    buffer = (int(slot.counters[IDENT]), sender, slot.fd, slot.size, slot.nbytes)
    return rebuild, (fd, buffer, dtype, layout)


ForkingPickler.register(PooledBatch, _reduce_pooled)


_Buffer = tuple[int, Sender, int, int, int]  # identity, sender, its descriptor's number, sizes
_PROCESS_WORD = random_word()  # tells a new process from an ended one


def rebuild(
    fd: Any, buffer: _Buffer, dtype: str, layout: tuple[tuple[int, ...], Any, int]
) -> torch.Tensor:
    """The receiving side of :class:`PooledBatch`: the buffer mapped, released when over."""
    ident, sender, _, size, nbytes = buffer
    fileno = fd.detach() if fd is not None else -1  # always taken: the sender let it go
    kept = kept_mappings().take(ident)
    if kept is not None:
        if fileno >= 0:
            os.close(fileno)
        mm, counters = kept.mm, kept.counters
    else:
        mm = _mapped(fileno, buffer)
        counters = np.frombuffer(memoryview(mm), np.uint64, COUNTERS, size - HEADER)
        kept = kept_mappings().add(ident, mm, counters, sender)
        if kept is not None:
            counters[KEPT] = kept_mappings().token
    np_dtype = np.dtype(dtype)
    arr = np.frombuffer(memoryview(mm), np_dtype, nbytes // np_dtype.itemsize)
    flat = torch.from_numpy(arr)
    release = functools.partial(_count_release, counters, ident if kept is not None else 0)
    buffer_release.watch(arr, flat, release, shared=True)
    buffer_release.sweep()
    shape, stride, offset = layout
    return flat.as_strided(shape, stride, offset)


def _mapped(fileno: int, buffer: _Buffer) -> Mapping:
    """The buffer mapped from its descriptor, or opened through its sender's ``/proc``."""
    ident, (sender, _), number, size, _ = buffer
    if fileno < 0:  # kept by another process: open it where the sender holds it
        try:
            fileno = os.open(f"/proc/{sender}/fd/{number}", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise RuntimeError(
                f"a batch buffer of process {sender} is kept mapped by another process and "
                f"cannot be opened here: {e}"
            ) from e
    try:
        if os.fstat(fileno).st_size < size:  # another file now: reading past its end faults
            raise _not_its_buffer(sender, number)
        mm = map_shared(fileno, size)
    finally:
        os.close(fileno)
    if int(np.frombuffer(memoryview(mm), np.uint64, 1, size - HEADER + 8 * IDENT)[0]) != ident:
        raise _not_its_buffer(sender, number)
    return mm


def _not_its_buffer(sender: int, number: int) -> RuntimeError:
    return RuntimeError(f"process {sender}'s descriptor {number} is no longer its batch buffer")


def _count_release(counters: np.ndarray, ident: int) -> None:
    """Count a release in the buffer, its kept mapping marked unused first.

    No lock is held here: a collection inside may release another batch, on this thread
    or while another thread waits for the kept mappings' lock. The count is one ufunc
    call, whose add the interpreter lock keeps whole.
    """
    if ident:  # before the count: the sender may send it again at once
        kept_mappings().release(ident)
    released = counters[RELEASED : RELEASED + 1]
    np.add(released, 1, out=released)


def _after_fork_in_child() -> None:
    global _PROCESS_WORD
    _PROCESS_WORD = random_word()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
