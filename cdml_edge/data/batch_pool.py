"""Batch buffers used again once nothing holds them, so a batch does not fault in fresh pages.

A 224-px float32 batch of 64 images is 38.5 MB. Allocated anew for every batch, each of its
pages is faulted in and zeroed again, batch after batch: on the benchmark VM that cost about
as much as the JPEG decode. The pool keeps a few buffers per size in each process and hands
one out again only when no tensor anywhere uses it any more, in this process or in the one
it was sent to:

* Each buffer carries three counters after its data: ``held`` (a tensor of this process uses
  it), ``sent`` (times it was pickled to another process, counted by the sender) and
  ``released`` (counted by the receiver when its last tensor over it is freed). A buffer is
  free when ``held == 0`` and ``sent == released``; each counter is written by one process
  only, so none needs an atomic update.
* A release is seen when the buffer's storage is freed, whatever views of it were made
  (``torch.from_numpy`` keeps the NumPy array, watched by :func:`weakref.finalize`, alive
  exactly as long as the storage).
* In a DataLoader worker the buffers are shared memory (``memfd_create``) and a batch is
  sent to the main process as its descriptor (:class:`PooledBatch`), as PyTorch's default
  ``file_descriptor`` sharing strategy sends a tensor; there it is mapped, not copied, and
  holds a descriptor while it lives, as with that strategy. Under ``file_system`` workers
  keep PyTorch's own path. In any other process the buffers are private memory.

Bounds: at most :data:`MAX_PER_SIZE` buffers per byte size and ``CDML_EDGE_BATCH_POOL_MIB``
(default 256, ``0`` turns the pool off) in all per process. When every buffer of a size is in
use and the bound is reached, a new buffer is made outside the pool, as without it.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from multiprocessing.reduction import DupFd
from typing import Any

import numpy as np
import torch
import torch.multiprocessing

MAX_PER_SIZE = 8  # a worker's batches in flight: prefetch, the loop's two, pinning, one filled
_HEADER = 64  # held, sent, released: three uint64 after the data, 64-byte aligned
_HELD, _SENT, _RELEASED = 0, 1, 2
_DEFAULT_MIB = 256


def pool_bytes() -> int:
    """The pool's bound in bytes from ``CDML_EDGE_BATCH_POOL_MIB`` (0: no pool)."""
    raw = os.environ.get("CDML_EDGE_BATCH_POOL_MIB", "").strip()
    try:
        mib = int(raw) if raw else _DEFAULT_MIB
    except ValueError:
        raise ValueError(f"CDML_EDGE_BATCH_POOL_MIB must be a whole number, got {raw!r}") from None
    if mib < 0:
        raise ValueError(f"CDML_EDGE_BATCH_POOL_MIB must be >= 0, got {raw!r}")
    return mib * 1024 * 1024


class _Slot:
    """One buffer: ``nbytes`` of data, then its counters; shared memory or private."""

    def __init__(self, nbytes: int, shared: bool) -> None:
        self.nbytes = nbytes
        self.offset = -(-nbytes // _HEADER) * _HEADER
        self.size = self.offset + _HEADER
        self.fd = -1
        if shared:
            self.fd = os.memfd_create("cdml-edge-batch", os.MFD_CLOEXEC)
            weakref.finalize(self, os.close, self.fd)
            os.ftruncate(self.fd, self.size)
            self.mm = mmap.mmap(self.fd, self.size)
        else:
            self.mm = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.counters = np.frombuffer(self.mm, np.uint64, 3, self.offset)
        self.address = int(np.frombuffer(self.mm, np.uint8, 1).ctypes.data)

    def free(self) -> bool:
        held, sent, released = (int(v) for v in self.counters)
        return held == 0 and sent == released

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor over the data, held until its storage is freed."""
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        arr = np.frombuffer(self.mm, np_dtype, self.nbytes // np_dtype.itemsize).reshape(shape)
        self.counters[_HELD] = 1
        weakref.finalize(arr, _unhold, self.counters, os.getpid()).atexit = False
        return torch.from_numpy(arr)


def _unhold(counters: np.ndarray, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child dropping what it inherited
        counters[_HELD] = 0


class BufferPool:
    """Buffers per byte size, handed out again once free (see the module's docstring)."""

    def __init__(self, max_bytes: int, shared: bool) -> None:
        self.max_bytes = max_bytes
        self.shared = shared
        self._slots: dict[int, list[_Slot]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, bool] | None:
        """A tensor of ``shape`` over a free buffer, and whether the buffer is new; or None.

        None when the pool is off or full for this size: the caller allocates as without it.
        """
        nbytes = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        if nbytes == 0 or self.max_bytes == 0:
            return None
        with self._lock:
            slots = self._slots.pop(nbytes, [])
            self._slots[nbytes] = slots  # the most recent size last
            for slot in slots:
                if slot.free():
                    return slot.tensor(shape, dtype), False
            if len(slots) >= MAX_PER_SIZE or not self._room(nbytes + _HEADER, nbytes):
                return None
            slot = _Slot(nbytes, self.shared)
            slots.append(slot)
            self._bytes += slot.size
            return slot.tensor(shape, dtype), True

    def _room(self, size: int, keep: int) -> bool:
        """Forget the least recent other sizes until ``size`` more bytes fit the bound."""
        for nbytes in list(self._slots):
            if self._bytes + size <= self.max_bytes:
                break
            if nbytes != keep:  # their tensors keep what is still in use alive
                self._bytes -= sum(s.size for s in self._slots.pop(nbytes))
        return self._bytes + size <= self.max_bytes

    def slot_of(self, tensor: torch.Tensor) -> _Slot | None:
        """The shared buffer ``tensor`` is the whole of, or None."""
        if not self.shared:
            return None
        address = tensor.untyped_storage().data_ptr()
        with self._lock:
            for slots in self._slots.values():
                for slot in slots:
                    if slot.address == address and tensor.untyped_storage().nbytes() == slot.nbytes:
                        return slot
        return None


class PooledBatch(torch.Tensor):
    """A worker's batch over a shared pool buffer: sent to the main process as its descriptor.

    Unpickled there, it is a plain tensor mapping the same memory (:func:`_rebuild`); the
    worker takes the buffer again only after that tensor's storage is freed.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]
    _slot: _Slot

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).__deepcopy__(memo)

    def __reduce_ex__(self, protocol: Any) -> Any:
        slot = self._slot
        dtype = str(torch.empty(0, dtype=self.dtype).numpy().dtype)
        slot.counters[_SENT] += 1  # before it leaves: the buffer stays taken until released
        return _rebuild, (DupFd(slot.fd), slot.size, slot.offset, tuple(self.shape), dtype)


_RELEASE_LOCK = threading.Lock()


def _rebuild(fd: Any, size: int, offset: int, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """The receiving side of :class:`PooledBatch`: the buffer mapped, released when freed."""
    fileno = fd.detach()
    try:
        mm = mmap.mmap(fileno, size)
    finally:
        os.close(fileno)
    counters = np.frombuffer(mm, np.uint64, 3, offset)
    np_dtype = np.dtype(dtype)
    arr = np.frombuffer(mm, np_dtype, int(np.prod(shape))).reshape(shape)
    weakref.finalize(arr, _count_release, counters, os.getpid()).atexit = False
    return torch.from_numpy(arr)


def _count_release(counters: np.ndarray, pid: int) -> None:
    if os.getpid() == pid:
        with _RELEASE_LOCK:
            counters[_RELEASED] += 1


def hand_over(images: torch.Tensor) -> torch.Tensor:
    """``images`` as it leaves a worker: a :class:`PooledBatch` if it is a pool buffer."""
    slot = pool().slot_of(images) if _in_worker() else None
    if slot is None:
        return images
    batch = images.as_subclass(PooledBatch)
    batch._slot = slot
    return batch


def _in_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


_POOL: BufferPool | None = None


def pool() -> BufferPool:
    """This process's pool: shared buffers in a DataLoader worker, private ones elsewhere."""
    global _POOL
    if _POOL is None:
        shared = _in_worker() and hasattr(os, "memfd_create") and _descriptors_shared()
        private_ok = hasattr(mmap, "MAP_PRIVATE")
        _POOL = BufferPool(pool_bytes() if (shared or private_ok) else 0, shared)
    return _POOL


def _descriptors_shared() -> bool:
    """Whether tensors leave this process as descriptors, PyTorch's default sharing strategy.

    With ``file_system`` (chosen to keep descriptors closed) the pool stays out of workers.
    """
    return torch.multiprocessing.get_sharing_strategy() == "file_descriptor"


def _forget_after_fork() -> None:
    global _POOL
    _POOL = None  # a child makes its own: the parent's buffers stay the parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
