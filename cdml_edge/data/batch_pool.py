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
  only, so none needs an atomic update. When a tensor's memory is over:
  :mod:`cdml_edge.data.buffer_release`. Three more words serve the receiver's kept
  mappings (:mod:`cdml_edge.data.kept_mappings`): ``kept`` (the receiver keeps it mapped),
  ``retired`` (this pool forgot it) and the buffer's identity, a random word.
* In a DataLoader worker the buffers are shared memory (``memfd_create``) and a batch is
  sent to the main process as its descriptor (:mod:`cdml_edge.data.batch_send`), as
  PyTorch's default ``file_descriptor`` sharing strategy sends a tensor; there it is mapped,
  not copied, and kept mapped for the buffer's next batch
  (:mod:`cdml_edge.data.kept_mappings`), which then comes without a descriptor. Under
  ``file_system`` workers keep PyTorch's own path. In any other process the buffers are
  private memory.

Bounds: at most :data:`MAX_PER_SIZE` buffers per byte size, :data:`MAX_SIZES` sizes, and
``CDML_EDGE_BATCH_POOL_MIB`` (default 256, ``0`` turns the pool off) in all per process.
When every buffer of a size is in use and a bound is reached, a new buffer is made outside
the pool, as without it.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading

import numpy as np
import torch
import torch.multiprocessing

from cdml_edge.data import buffer_release

MAX_PER_SIZE = 8  # a worker's batches in flight: prefetch, the loop's two, pinning, one filled
MAX_SIZES = 4  # batch sizes kept (the last batch of an epoch is another)
HEADER = 64  # the counters after the data, 64-byte aligned
HELD, SENT, RELEASED = 0, 1, 2
KEPT, RETIRED, IDENT = 3, 4, 5  # see cdml_edge.data.kept_mappings
COUNTERS = 6
_DEFAULT_MIB = 256


def pool_bytes() -> int:
    """The pool's bound in bytes from ``CDML_EDGE_BATCH_POOL_MIB`` (0: no pool)."""
    return mib_from_env("CDML_EDGE_BATCH_POOL_MIB", _DEFAULT_MIB)


def mib_from_env(name: str, default: int) -> int:
    """Bytes from the environment variable ``name``, in MiB (``default`` when unset)."""
    raw = os.environ.get(name, "").strip()
    try:
        mib = int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if mib < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return mib * 1024 * 1024


def random_word() -> int:
    """A random 64-bit word: a buffer's identity, a process's own word."""
    return int.from_bytes(os.urandom(8), "little")


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (``torch.float32`` → ``float32``)."""
    return torch.empty(0, dtype=dtype).numpy().dtype


def slot_size(nbytes: int) -> int:
    """Bytes a buffer of ``nbytes`` takes: the data rounded up to 64, then the counters."""
    return -(-nbytes // HEADER) * HEADER + HEADER


class Slot:
    """One buffer: ``nbytes`` of data, then its counters; shared memory or private."""

    def __init__(self, nbytes: int, shared: bool) -> None:
        self.nbytes = nbytes
        self.size = slot_size(nbytes)
        self.offset = self.size - HEADER
        self.fd = -1
        if shared:
            self.fd = os.memfd_create(buffer_release.MEMFD_NAME.decode(), os.MFD_CLOEXEC)
            self._close = functools.partial(os.close, self.fd)
            os.ftruncate(self.fd, self.size)
            self.mm = mmap.mmap(self.fd, self.size)
        else:
            self.mm = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.counters = np.frombuffer(self.mm, np.uint64, COUNTERS, self.offset)
        self.counters[IDENT] = random_word()
        self.address = int(np.frombuffer(self.mm, np.uint8, 1).ctypes.data)

    def __del__(self) -> None:
        close = getattr(self, "_close", None)
        if close is not None:
            close()

    def free(self) -> bool:
        """Whether no tensor of this process holds it and every one sent was released."""
        held, sent, released = (int(v) for v in self.counters[:3])
        return held == 0 and sent == released

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor over the data, held until its memory is no longer used here."""
        np_dtype = numpy_dtype(dtype)
        arr = np.frombuffer(self.mm, np_dtype, self.nbytes // np_dtype.itemsize).reshape(shape)
        self.counters[HELD] = 1
        tensor = torch.from_numpy(arr)
        release = functools.partial(_unhold, self.counters)
        buffer_release.watch(arr, tensor, release, shared=self.fd >= 0)
        return tensor


def _unhold(counters: np.ndarray) -> None:
    counters[HELD] = 0


class BufferPool:
    """Buffers per byte size, handed out again once free (see the module's docstring)."""

    def __init__(self, max_bytes: int, shared: bool) -> None:
        self.max_bytes = max_bytes
        self.shared = shared
        self._slots: dict[int, list[Slot]] = {}
        self._retired: list[Slot] = []  # forgotten, still out: their descriptors stay open
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, bool] | None:
        """A tensor of ``shape`` over a free buffer, and whether the buffer is new; or None.

        None when the pool is off or full for this size: the caller allocates as without it.
        """
        nbytes = int(np.prod(shape)) * numpy_dtype(dtype).itemsize
        if nbytes == 0 or self.max_bytes == 0:
            return None
        buffer_release.sweep()
        with self._lock:
            self._retired = [slot for slot in self._retired if not slot.free()]
            slots = self._slots.pop(nbytes, [])
            self._slots[nbytes] = slots  # the most recent size last
            for slot in slots:
                if slot.free():
                    return slot.tensor(shape, dtype), False
            if len(slots) >= MAX_PER_SIZE or not self._room(slot_size(nbytes), nbytes):
                if not slots:
                    del self._slots[nbytes]
                return None
            slot = Slot(nbytes, self.shared)
            slots.append(slot)
            self._bytes += slot.size
            return slot.tensor(shape, dtype), True

    def _room(self, size: int, keep: int) -> bool:
        """Forget the least recent other sizes until ``size`` more bytes and the size fit."""
        if size > self.max_bytes:
            return False  # never fits: the other sizes stay
        for nbytes in list(self._slots):
            fits = self._bytes + size <= self.max_bytes and len(self._slots) <= MAX_SIZES
            if fits:
                break
            if nbytes != keep:  # their tensors keep what is still in use alive
                for forgotten in self._slots.pop(nbytes):
                    forgotten.counters[RETIRED] = 1  # a receiver need not keep it mapped
                    self._bytes -= forgotten.size
                    if not forgotten.free():  # a batch of it may still be on its way
                        self._retired.append(forgotten)
        return self._bytes + size <= self.max_bytes

    def slot_of(self, tensor: torch.Tensor) -> Slot | None:
        """The shared buffer whose memory ``tensor``'s storage is, or None."""
        if not self.shared:
            return None
        storage = tensor.untyped_storage()
        with self._lock:
            for slots in self._slots.values():
                for slot in slots:
                    if slot.address == storage.data_ptr() and storage.nbytes() == slot.nbytes:
                        return slot
        return None


_POOL: BufferPool | None = None


def pool() -> BufferPool:
    """This process's pool: shared buffers in a DataLoader worker, private ones elsewhere."""
    global _POOL
    if _POOL is None:
        shared = in_worker() and hasattr(os, "memfd_create") and _descriptors_shared()
        private_ok = hasattr(mmap, "MAP_PRIVATE")
        _POOL = BufferPool(pool_bytes() if (shared or private_ok) else 0, shared)
    return _POOL


def in_worker() -> bool:
    """Whether this process is a DataLoader worker."""
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


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
