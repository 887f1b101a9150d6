"""Small tensors leave a DataLoader worker inside the message, not through shared memory.

PyTorch sends every tensor a worker returns through shared memory: the storage is moved
into a new shared segment, whose descriptor the main process then fetches over a
connection of multiprocessing's resource sharer (a connect, an authentication handshake, a
``recvmsg``). For a batch's labels, a few hundred bytes, that costs more than the bytes:
6-9 µs of the main process's CPU per image at a batch of 64, measured.
:func:`~cdml_edge.data.batch.collate` therefore marks its targets tensor with
:func:`inline` in a worker, and multiprocessing's pickler (what the DataLoader's queues
use) sends the values of a marked tensor in the message itself, when it still qualifies as
it leaves (else as PyTorch sends any tensor). The main process gets a plain tensor of the
same dtype, shape and values. Any other pickling (``torch.save``, ``pickle.dumps``, a deep
copy) sees a plain tensor.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import reduce_tensor

from cdml_edge.data.batch_pool import in_worker
from cdml_edge.data.marked_tensor import MarkedTensor

INLINE_BYTES = 64 * 1024
"""The largest tensor sent inside the message; larger ones go through shared memory."""

_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


class InlineTensor(MarkedTensor):
    """A small tensor of a worker, sent by value to the main process; plain otherwise."""


def inline(value: Any) -> Any:
    """``value``, marked to leave this worker by value if it is a small plain CPU tensor.

    Unchanged outside a DataLoader worker, and for anything else: another type or subclass,
    or a tensor that does not qualify (:func:`_by_value`).
    """
    if type(value) is not torch.Tensor or not in_worker() or not _by_value(value):
        return value
    return value.as_subclass(InlineTensor)


def _by_value(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` may be sent by value.

    On the CPU, strided and contiguous, needing no gradient, in a dtype NumPy has and of at
    most :data:`INLINE_BYTES`: its values are all there is to it.
    """
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and tensor.dtype in _NUMPY_DTYPES
        and tensor.is_contiguous()
        and not (tensor.is_conj() or tensor.is_neg())
        and tensor.numel() * tensor.element_size() <= INLINE_BYTES
    )


def _reduce_inline(tensor: InlineTensor) -> Any:
    """Multiprocessing's pickling of an :class:`InlineTensor`: its values, dtype and shape.

    As PyTorch sends any tensor when it no longer qualifies (changed in place since it was
    marked: made to need a gradient, turned, resized).
    """
    plain = tensor.detach().as_subclass(torch.Tensor)  # a leaf over the same memory
    if _by_value(tensor):
        try:
            values = plain.numpy()
        except (RuntimeError, TypeError):  # a state numpy() refuses: PyTorch's path
            pass
        else:
            return rebuild, (values.tobytes(), values.dtype.str, tuple(values.shape))
    return reduce_tensor(plain.requires_grad_(tensor.requires_grad))


def rebuild(data: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The receiving side of :class:`InlineTensor`: a plain tensor over its own memory."""
    return torch.from_numpy(np.frombuffer(bytearray(data), np.dtype(dtype)).reshape(shape))


ForkingPickler.register(InlineTensor, _reduce_inline)
