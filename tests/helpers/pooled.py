"""A pool buffer filled and pickled as a DataLoader worker sends it, for the pool's tests."""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import torch

from cdml_edge.data.batch_pool import BufferPool, Slot
from cdml_edge.data.batch_send import PooledBatch

SHAPE = (4, 3, 16, 16)
NBYTES = 4 * 3 * 16 * 16
PATTERN = torch.arange(NBYTES).reshape(SHAPE).remainder(251).to(torch.uint8)


def sent(pool: BufferPool, shape: tuple[int, ...] = SHAPE) -> tuple[bytes, Slot]:
    """A buffer of ``pool`` filled (``PATTERN`` at ``SHAPE``, else ones) and pickled.

    The message a worker's queue carries; the worker's tensor is dropped, so the buffer
    stays taken only by the send.
    """
    taken = pool.take(shape, torch.uint8)
    assert taken is not None
    images = taken[0]
    images.copy_(PATTERN if shape == SHAPE else torch.ones(shape, dtype=torch.uint8))
    slot = pool.slot_of(images)
    assert slot is not None
    batch = images.as_subclass(PooledBatch)
    batch._slot = slot
    data = bytes(ForkingPickler.dumps(batch))
    del images, batch
    return data, slot
