"""Image batches decoded into one buffer: the output dtype and layout, and their collation.

A batch of same-size images is written into one tensor as it is decoded (``B×3×H×W`` or
``B×H×W×3``, float32 in [0, 1] or uint8), so that no per-item tensor is made and the
collate copies nothing. :func:`fill_images` returns the items as views of that
buffer in a :class:`Collated` list: the default collate takes the buffer as it is when the
views are a whole fresh batch in order (:class:`BatchItem`), and :func:`collate` always.

The buffer comes from the process's pool (:mod:`cdml_edge.data.batch_pool`): used again
once no tensor holds it, in shared memory inside a DataLoader worker, so that a batch
neither faults in fresh pages (a 224-px float32 image written into fresh shared memory cost
550 µs against 90 µs into warm memory on the benchmark VM) nor is copied as it leaves. A
new buffer is pre-faulted in one call (:func:`prefault`). Where the pool is off or full, a
new tensor: shared memory in a worker once a buffer has been handed over there. With
``reuse`` (``reuse_batch_buffers``) a worker takes its buffers from a ring instead
(:func:`check_reuse` for the contract).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import cv2
import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import (
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
)

from cdml_edge.data.batch_pool import pool
from cdml_edge.data.batch_send import hand_over
from cdml_edge.data.inline_send import inline
from cdml_edge.data.marked_tensor import MarkedTensor
from cdml_edge.decode.native import helpers

ImageDtype = Literal["float32", "uint8"]
IMAGE_DTYPES: tuple[str, ...] = ("float32", "uint8")
_TORCH = {"float32": torch.float32, "uint8": torch.uint8}
_SCALE = np.float32(255.0)


def check_image_dtype(dtype: str) -> ImageDtype:
    """``dtype`` if it is one of :data:`IMAGE_DTYPES`, else ``ValueError``."""
    if dtype not in IMAGE_DTYPES:
        raise ValueError(f"image_dtype must be one of {IMAGE_DTYPES}, got {dtype!r}")
    return dtype  # type: ignore[return-value]


def to_sample(rgb: np.ndarray, dtype: ImageDtype, channels_last: bool) -> torch.Tensor:
    """One uint8 ``H×W×3`` image as a sample tensor of ``dtype`` and layout."""
    out = np.empty(rgb.shape if channels_last else (3, *rgb.shape[:2]), _np(dtype))
    _write(out, rgb, dtype, channels_last)
    return torch.from_numpy(out)


class Collated(list[Any]):
    """A batch's items, each a view of ``images`` (and its target); see :func:`collate`."""

    images: torch.Tensor
    targets: list[Any] | None


def fill_images(
    rgbs: Sequence[Callable[[], np.ndarray]],
    size: tuple[int, int],
    dtype: ImageDtype,
    channels_last: bool,
    targets: list[Any] | None,
    reuse: int = 0,
) -> Collated:
    """Decode each image (``rgbs[k]()``, uint8 ``H×W×3`` of ``size``) into one buffer.

    ``reuse``: see :func:`check_reuse`.
    """
    w, h = size
    shape = (len(rgbs), h, w, 3) if channels_last else (len(rgbs), 3, h, w)
    images = _buffer(shape, _TORCH[dtype], reuse)
    arr = images.numpy()
    for k, rgb in enumerate(rgbs):
        _write(arr[k], rgb(), dtype, channels_last)
    views = list(images.unbind(0))
    if reuse <= 0:  # a fresh buffer: the default collate may take it as it is
        views = [v.as_subclass(BatchItem) for v in views]
    batch = Collated(views if targets is None else zip(views, targets, strict=True))
    batch.images, batch.targets = images, targets
    return batch


class BatchItem(MarkedTensor):
    """One image of a fresh batch buffer (:func:`fill_images`), a plain tensor otherwise.

    Its type lets the default collate recognise the whole batch in order and hand the buffer
    over without ``torch.stack`` (:func:`_collate_items`, registered in PyTorch's
    ``default_collate_fn_map``). What is computed from it is a plain tensor.
    """


def _collate_items(batch: Sequence[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """The default collate of :class:`BatchItem` s: their buffer, without a copy.

    Only once, and only when they are all of it in order and none needs a gradient; else
    they are stacked, as by the default collate (a new tensor).
    """
    global _handed_over
    fixed = not any(t.requires_grad or getattr(t, "_taken", False) for t in batch)
    whole = _whole_buffer(batch) if fixed else None
    if whole is None:
        plain = [t.as_subclass(torch.Tensor) for t in batch]
        return collate_tensor_fn(plain, collate_fn_map=collate_fn_map)
    _mark_taken(batch)
    _handed_over = True
    return hand_over(whole)


def _mark_taken(items: Any) -> None:
    """The buffer of ``items`` is handed over: the default collate will copy them."""
    for t in items:
        if isinstance(t, BatchItem):
            t._taken = True  # type: ignore[attr-defined]


def _whole_buffer(batch: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The buffer the items of ``batch`` are the consecutive rows of, all of it, or None."""
    first = batch[0]
    storage = first.untyped_storage()
    step = first.numel()
    start = first.storage_offset()
    if not first.is_contiguous() or step * len(batch) * first.element_size() != storage.nbytes():
        return None
    for k, item in enumerate(batch):
        same = item.untyped_storage().data_ptr() == storage.data_ptr()
        at = item.storage_offset() == start + k * step
        if not (same and at and item.shape == first.shape and item.stride() == first.stride()):
            return None
    whole = torch.empty(0, dtype=first.dtype)
    return whole.set_(storage, start, (len(batch), *first.shape), (step, *first.stride()))


default_collate_fn_map[BatchItem] = _collate_items

_handed_over = False  # a buffer was given away in this process: allocate shared ones


def collate(batch: Sequence[Any]) -> Any:
    """A DataLoader ``collate_fn``: a :class:`Collated` batch without copying its images.

    As the default collate otherwise: ``images`` or ``[images, targets]``.
    """
    global _handed_over
    if not isinstance(batch, Collated):
        return default_collate(batch)
    _handed_over = True
    _mark_taken(batch if batch.targets is None else [x for x, _ in batch])
    if batch.targets is None:
        return hand_over(batch.images)
    return [hand_over(batch.images), inline(default_collate(batch.targets))]


def _np(dtype: ImageDtype) -> type[np.generic]:
    return np.float32 if dtype == "float32" else np.uint8


def _write(dst: np.ndarray, rgb: np.ndarray, dtype: ImageDtype, channels_last: bool) -> None:
    """``rgb`` into ``dst``: transposed unless ``channels_last``, scaled to [0, 1] if float.

    The float values are those of ``rgb.astype(float32) / 255`` (the same division).
    """
    if dst.shape[:2] != (rgb.shape[:2] if channels_last else (3, rgb.shape[0])):
        raise ValueError(f"image of shape {rgb.shape} does not fit a slot of {dst.shape}")
    if not channels_last and rgb.shape[0] * rgb.shape[1] >= _SPLIT_PIXELS:
        _write_planes(dst, rgb, dtype)
        return
    src = rgb if channels_last else rgb.transpose(2, 0, 1)
    if dtype == "uint8":
        dst[...] = src
    else:
        _scaled_into(dst, src)


_SPLIT_PIXELS = 128 * 128  # from here on cv2.split beats numpy's strided transpose


def _write_planes(dst: np.ndarray, rgb: np.ndarray, dtype: ImageDtype) -> None:
    """``rgb`` (H×W×3) into ``dst`` (3×H×W): ``cv2.split`` into the planes, then scaled.

    The same values as the transposed copy; at 224 px a uint8 image takes 8 µs instead of
    42 (float32: 52 µs instead of 81, before the scaling of :func:`_scaled_into`).
    """
    planes = dst if dtype == "uint8" and dst.flags.c_contiguous else np.empty(dst.shape, np.uint8)
    cv2.split(rgb, list(planes))
    if planes is dst:
        return
    if dtype == "uint8":
        dst[...] = planes
    else:
        _scaled_into(dst, planes)


def _scaled_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``src / 255`` (uint8) into ``dst`` (float32, the same shape), in one pass where it can.

    The decoders' C helper when both are contiguous; else NumPy casts into ``dst`` and
    divides it in place. Both give the values of ``np.divide(src, 255, dtype=float32)``,
    which converts in small buffered blocks: a 224-px image into a batch slot that is not
    in the cache cost it 77 µs, the cast and division 58-60 µs, the C helper 46 µs.
    """
    native = helpers()
    same = dst.shape == src.shape and src.dtype == np.uint8 and dst.dtype == np.float32
    if native is not None and same and dst.flags.c_contiguous and src.flags.c_contiguous:
        ffi, lib = native
        out = ffi.from_buffer(dst, require_writable=True)  # held for the call
        lib.cdml_scale_to_unit(ffi.from_buffer(src), src.size, ffi.cast("float *", out))
        return
    np.copyto(dst, src, casting="unsafe")
    np.divide(dst, _SCALE, out=dst)


def check_reuse(reuse: int) -> int:
    """``reuse`` (``reuse_batch_buffers``) if it is an int >= 0, else ``ValueError``.

    0 (the default): a batch's buffer is used again only once nothing holds it (the pool).
    N > 0: a worker hands its batches out in a ring of N shared buffers per batch shape and
    dtype, so a batch is overwritten when that worker makes its N-th next batch of the same
    shape. A worker has at most ``prefetch_factor`` batches under way beyond the one the
    loop holds, and is given one more each time the loop takes one: a batch stays valid until
    ``N - prefetch_factor`` more batches have been taken (``× num_workers`` with the
    default ``in_order=True``, which hands tasks to the workers in turn). N must exceed
    ``prefetch_factor`` (2 by default), else a batch can be overwritten before the loop gets
    it. Outside a worker (``num_workers=0``) there is no ring (it would be shared by every
    dataset and loader of the process): the pool's rule holds there.
    """
    if isinstance(reuse, bool) or not isinstance(reuse, int) or reuse < 0:
        raise ValueError(f"reuse_batch_buffers must be an int >= 0, got {reuse!r}")
    return reuse


class _Ring:
    """The shared buffers of one batch shape, dtype and ring size, handed out in turn."""

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.next = 0


_RINGS: dict[tuple[tuple[int, ...], torch.dtype, int], _Ring] = {}
_MAX_RINGS = 4  # batch shapes kept in this process (the last batch of an epoch is another)


def _buffer(shape: tuple[int, ...], dtype: torch.dtype, reuse: int = 0) -> torch.Tensor:
    """An uninitialised tensor, from this process's pool of free buffers where it has room.

    With ``reuse`` > 0, in any worker (from its first batch on: that option is meant for
    :func:`collate`), the buffer handed out ``reuse`` batches of this shape ago. Without
    room in the pool: shared memory in a worker that hands buffers over, else ordinary.
    """
    worker = get_worker_info() is not None
    if worker and reuse > 0:
        return _ring_buffer(shape, dtype, reuse)
    taken = pool().take(shape, dtype)
    if taken is not None:
        images, new = taken
        if new:
            prefault(images)
        return images
    if worker and _handed_over:
        return _new_shared(shape, dtype)
    return torch.empty(shape, dtype=dtype)


def _ring_buffer(shape: tuple[int, ...], dtype: torch.dtype, reuse: int) -> torch.Tensor:
    """The shared buffer handed out ``reuse`` batches of this shape ago (a new one at first)."""
    key = (shape, dtype, reuse)
    ring = _RINGS.get(key)
    if ring is None:
        if len(_RINGS) >= _MAX_RINGS:
            del _RINGS[next(iter(_RINGS))]  # the oldest shape
        ring = _RINGS[key] = _Ring()
    if len(ring.buffers) < reuse:
        ring.buffers.append(_new_shared(shape, dtype))
        return ring.buffers[-1]
    images = ring.buffers[ring.next]
    ring.next = (ring.next + 1) % reuse
    return images


def _new_shared(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A new tensor in shared memory, its pages faulted in (:func:`prefault`)."""
    elem = torch.empty(0, dtype=dtype)
    numel = int(np.prod(shape))
    storage = elem._typed_storage()._new_shared(numel, device=elem.device)
    images = elem.new(storage).resize_(shape)
    prefault(images)
    return images


_MADV_POPULATE_WRITE = 23  # Linux >= 5.14
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EPERM)


def prefault(tensor: torch.Tensor) -> bool:
    """Fault in the pages of ``tensor``'s storage for writing, in one call.

    ``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14 and later) allocates the pages in the kernel
    in one pass instead of one page fault per page as they are first written; the contents
    do not change. False, doing nothing, where it is not available (other systems, older
    kernels): the pages are then faulted in as they are written, as without this call.
    """
    global _MADVISE
    madvise = _MADVISE
    storage = tensor.untyped_storage()
    size = storage.nbytes()
    if madvise is None or size == 0:
        return False
    addr = storage.data_ptr()
    start = addr - addr % mmap.PAGESIZE
    if madvise(start, addr + size - start, _MADV_POPULATE_WRITE) == 0:
        return True
    if ctypes.get_errno() in _UNSUPPORTED:
        _MADVISE = None  # not on this kernel: do not ask again
    return False


def _load_madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _load_madvise()
