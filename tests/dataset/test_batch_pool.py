"""Batch buffers used again only once nothing, in any process, holds them."""

from __future__ import annotations

import copy
import gc
import os
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch
from helpers.dataset_data import class_images, write
from helpers.pooled import NBYTES, SHAPE, sent
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset
from cdml_edge.data import batch_pool, buffer_release, collate
from cdml_edge.data.batch_pool import MAX_PER_SIZE, BufferPool
from cdml_edge.data.batch_send import PooledBatch


def _take(pool: BufferPool, shape: tuple[int, ...] = SHAPE) -> tuple[torch.Tensor, bool]:
    taken = pool.take(shape, torch.uint8)
    assert taken is not None
    return taken


@pytest.mark.parametrize("shared", [False, True])
def test_a_buffer_is_used_again_only_when_no_view_holds_it(shared: bool) -> None:
    pool = BufferPool(1 << 30, shared)
    a, new = _take(pool)
    assert new and a.shape == SHAPE and a.dtype == torch.uint8
    b, new = _take(pool)
    assert new and b.data_ptr() != a.data_ptr()
    address = a.data_ptr()
    view = a[1].view(-1)[5:]  # a view keeps the storage, the buffer stays taken
    del a
    c, new = _take(pool)
    assert new and c.data_ptr() not in (address, b.data_ptr())
    del view
    d, new = _take(pool, (2, 6, 16, 16))  # the same byte size in another shape
    assert not new and d.data_ptr() == address and d.shape == (2, 6, 16, 16)


def test_a_sent_buffer_stays_taken_until_the_receiver_frees_it() -> None:
    pool = BufferPool(1 << 30, shared=True)
    data, slot = sent(pool)
    assert not slot.free()  # sent, not yet received
    received = pickle.loads(data)
    assert type(received) is torch.Tensor and received.shape == SHAPE
    assert torch.equal(received.long(), torch.arange(NBYTES).reshape(SHAPE).remainder(251))
    received[0, 0, 0, 0] = 250  # the same memory, mapped: no copy
    assert pool.slot_of(received) is None  # a mapping of its own in the receiver
    again, new = _take(pool)
    assert new  # another buffer: the receiver holds the first
    kept = received.reshape(-1)[:10]  # a view keeps it too
    del received
    assert not slot.free()
    del kept
    assert slot.free()
    del again
    reused, new = _take(pool)
    assert not new


def test_the_sent_memory_is_the_buffer() -> None:
    pool = BufferPool(1 << 30, shared=True)
    images, _ = _take(pool)
    slot = pool.slot_of(images)
    assert slot is not None
    batch = images.as_subclass(PooledBatch)
    batch._slot = slot
    received = pickle.loads(bytes(ForkingPickler.dumps(batch)))
    received.fill_(7)
    assert bool((images == 7).all())  # one buffer, two mappings
    copied = copy.deepcopy(batch)
    assert type(copied) is torch.Tensor and copied.data_ptr() != images.data_ptr()


def test_a_buffer_held_at_a_fork_is_released_once_the_child_has_ended() -> None:
    """A forked child may read what its parent held: the buffer waits for the child's end."""
    pool = BufferPool(1 << 30, shared=True)
    data, slot = sent(pool)
    received = pickle.loads(data)
    expected = received.clone()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads its inherited batch once told to, then ends
        os.close(w)
        os.read(r, 1)
        os._exit(0 if torch.equal(received, expected) else 1)
    os.close(r)
    del received
    gc.collect()
    other, new = _take(pool)  # the parent goes on: another buffer, filled
    assert new and not slot.free()
    other.fill_(7)
    os.write(w, b"x")
    _, status = os.waitpid(pid, 0)
    os.close(w)
    assert os.waitstatus_to_exitcode(status) == 0  # the child read its batch intact
    buffer_release.sweep()
    assert slot.free()


def test_the_pool_is_bounded() -> None:
    pool = BufferPool(1 << 30, shared=False)
    held = [_take(pool)[0] for _ in range(MAX_PER_SIZE)]
    assert pool.take(SHAPE, torch.uint8) is None  # every buffer of the size in use
    del held
    small = BufferPool(3 * (NBYTES + 64), shared=False)
    held = [_take(small)[0] for _ in range(3)]
    assert small.take(SHAPE, torch.uint8) is None  # the bound in bytes
    del held
    other, new = _take(small, (2, 3, 16, 16))  # another size: the first's buffers forgotten
    assert new and len(small._slots) == 1
    assert small.take((0, 3), torch.uint8) is None  # nothing to pool
    off = BufferPool(0, shared=False)
    assert off.take(SHAPE, torch.uint8) is None


@pytest.mark.parametrize("raw, expected", [("", 256 << 20), ("0", 0), (" 64 ", 64 << 20)])
def test_the_bound_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: int
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", raw)
    assert batch_pool.pool_bytes() == expected


@pytest.mark.parametrize("raw", ["-1", "lots", "1.5"])
def test_a_bad_bound_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", raw)
    with pytest.raises(ValueError, match="CDML_EDGE_BATCH_POOL_MIB"):
        batch_pool.pool_bytes()


@pytest.fixture(scope="module")
def pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("pool") / "pets.zip", class_images(4))


def _worker_pids(loader: DataLoader) -> list[int]:
    workers = loader._iterator._workers  # type: ignore[union-attr]
    assert len(workers) == 2
    return [w.pid for w in workers]


def _memfds(pid: int, inherited: set[int]) -> int:
    """The pool buffers (memfds; a mapping holds a descriptor of its own) ``pid`` made.

    Not ``inherited``, this process's when the worker started (a forked worker keeps its
    parent's); this process keeps descriptors of the workers' buffers too.
    """
    return len(_memfd_inodes(pid) - inherited)


def _memfd_inodes(pid: int) -> set[int]:
    inodes = set()
    for f in Path(f"/proc/{pid}/fd").iterdir():
        try:  # a descriptor may close meanwhile
            if "cdml-edge-batch" in os.readlink(f):
                inodes.add(f.stat().st_ino)
        except OSError:
            pass
    return inodes


@pytest.mark.parametrize("collate_fn", [None, collate])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_kept_batches_stay_intact_and_free_buffers_are_used_again(
    pets: Path, collate_fn: object, dtype: str
) -> None:
    """Two workers, four epochs: batches kept are never overwritten; the rest are reused."""
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype=dtype)
    ref = [x.clone() for x in DataLoader(ds, batch_size=2, collate_fn=collate_fn)]
    inherited = _memfd_inodes(os.getpid())
    loader = DataLoader(
        ds, batch_size=2, num_workers=2, persistent_workers=True, collate_fn=collate_fn
    )
    kept = list(loader)  # every batch of the first epoch held
    for _ in range(3):
        for k, x in enumerate(loader):
            assert type(x) is torch.Tensor and torch.equal(x, ref[k])
    assert all(torch.equal(x, r) for x, r in zip(kept, ref, strict=True))
    buffers = [_memfds(pid, inherited) for pid in _worker_pids(loader)]
    batches = 4 * len(ref) // 2  # per worker
    assert all(0 < n <= MAX_PER_SIZE for n in buffers) and sum(buffers) < 2 * batches
    del loader


def test_workers_keep_pytorchs_path_under_the_file_system_strategy(pets: Path) -> None:
    """``file_system`` is chosen to keep descriptors closed: no pool buffers in workers."""
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8")
    ref = [x.clone() for x in DataLoader(ds, batch_size=2)]
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        inherited = _memfd_inodes(os.getpid())
        loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
        kept = list(loader)
        assert [_memfds(pid, inherited) for pid in _worker_pids(loader)] == [0, 0]
        del loader
    finally:
        torch.multiprocessing.set_sharing_strategy(before)
    assert all(torch.equal(x, r) for x, r in zip(kept, ref, strict=True))


def test_a_buffer_held_when_dataloader_workers_start_waits_for_their_end() -> None:
    """Workers run the user's dataset, which may hold what the parent held at their start."""
    pool = BufferPool(1 << 30, shared=True)
    data, slot = sent(pool)
    received = pickle.loads(data)
    loader = DataLoader(list(range(4)), num_workers=2, persistent_workers=True)
    assert [int(x) for x in loader] == [0, 1, 2, 3]
    del received
    buffer_release.sweep()
    assert not slot.free()  # the workers still run
    del loader  # they end
    buffer_release.sweep()
    assert slot.free()


def test_memory_a_storage_moved_away_from_is_released_once_the_storage_is_gone() -> None:
    """``share_memory_()`` moves the storage; a NumPy view made before still reads the buffer."""
    pool = BufferPool(1 << 30, shared=False)
    images, _ = _take(pool)
    images.fill_(9)
    view = images.numpy()
    address = images.data_ptr()
    images.share_memory_()  # now other memory; ``view`` still reads the buffer
    assert images.data_ptr() != address
    other, new = _take(pool)
    assert new and other.data_ptr() != address and int(view.sum()) == 9 * NBYTES
    del view, images  # the storage is gone: the buffer is free at the next take
    again, new = _take(pool)
    assert not new and again.data_ptr() == address
