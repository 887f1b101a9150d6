"""A worker's batch buffers stay mapped in the main process from one batch to the next."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers.dataset_data import class_images, write
from helpers.forked import in_a_child
from helpers.pooled import NBYTES, PATTERN, SHAPE, sent
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset
from cdml_edge.data import batch_send, buffer_release, collate, kept_mappings
from cdml_edge.data.batch_pool import IDENT, KEPT, MAX_PER_SIZE, RETIRED, BufferPool, slot_size
from cdml_edge.data.batch_send import PooledBatch


@pytest.fixture(scope="module")
def pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("kept") / "pets.zip", class_images(6))


def _mapped_buffers(pid: int | str = "self") -> int:
    """Pool buffers mapped in a process."""
    return len(_buffer_mappings(pid))


def _buffer_mappings(pid: int | str = "self") -> set[str]:
    """The address ranges of the pool buffers mapped in a process."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split()[0] for line in maps if buffer_release.MEMFD_NAME.decode() in line}


def _pidfds(of: set[int | None] | None = None) -> int:
    """This process's open process descriptors (``of``: of these processes only)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(fd) != "anon_inode:[pidfd]":
                continue
            info = Path(f"/proc/self/fdinfo/{fd.name}").read_text()
            pid = int(info.split("Pid:")[1].split()[0])
            count += of is None or pid in of
    return count


def _eventually(done: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether ``done()`` comes true within ``seconds`` (what a thread does meanwhile)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _loader(pets: Path, **kw: object) -> tuple[DataLoader, list[torch.Tensor]]:
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8")
    ref = [x.clone() for x in DataLoader(ds, batch_size=2, collate_fn=collate)]
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate, **kw)  # type: ignore[arg-type]
    return loader, ref


def test_a_workers_buffers_stay_mapped_from_one_batch_to_the_next(
    pets: Path, fresh: kept_mappings.KeptMappings
) -> None:
    loader, ref = _loader(pets, persistent_workers=True)
    for _ in range(4):
        for k, x in enumerate(loader):
            assert torch.equal(x, ref[k])
    batches = 4 * len(ref)
    assert fresh.misses <= 2 * MAX_PER_SIZE  # a mapping per buffer, not per batch
    assert fresh.hits == batches - fresh.misses and fresh.hits > batches // 2
    assert 0 < len(fresh) == fresh.misses
    del loader, x


def test_the_buffers_of_ended_workers_are_unmapped(
    pets: Path, fresh: kept_mappings.KeptMappings
) -> None:
    before = _buffer_mappings()  # other tests' may still go meanwhile
    loader, ref = _loader(pets)
    for _ in range(2):  # workers anew each epoch: the first epoch's forgotten
        batches = list(loader)
        assert all(torch.equal(x, r) for x, r in zip(batches, ref, strict=True))
        assert len(fresh) > 0
    assert _buffer_mappings() - before
    del batches, loader
    gc.collect()
    buffer_release.sweep()
    assert _eventually(lambda: len(fresh) == 0 and fresh._senders == set())
    assert _buffer_mappings() <= before


def test_a_persistent_loaders_buffers_are_unmapped_once_it_is_gone(
    pets: Path, fresh: kept_mappings.KeptMappings
) -> None:
    """Nothing is received or released after its workers end: the watching thread sees it."""
    before, pidfds = _buffer_mappings(), _pidfds()  # other tests' may still go meanwhile
    loader, ref = _loader(pets, persistent_workers=True)
    for _ in range(2):
        for k, x in enumerate(loader):
            assert torch.equal(x, ref[k])
    del x
    workers = list(loader._iterator._workers)  # type: ignore[union-attr]
    assert len(fresh) > 0 and _buffer_mappings() - before
    assert _pidfds({w.pid for w in workers}) == 2  # one watches each worker
    del loader
    for worker in workers:
        worker.join(10)
    assert _eventually(lambda: len(fresh) == 0 and _buffer_mappings() <= before)
    assert _pidfds() <= pidfds


def test_a_child_gets_the_batches_in_use_and_not_the_buffers_kept_unused(
    pets: Path, fresh: kept_mappings.KeptMappings
) -> None:
    loader, ref = _loader(pets, persistent_workers=True)
    held: list[torch.Tensor] = []
    for _ in range(2):
        held[:] = list(loader)[:1]  # one batch in use, the others' buffers kept unused
    assert len(fresh) >= 3
    before = _mapped_buffers()

    def child() -> bool:  # the held batch is there and intact, the unused buffers are not
        return _mapped_buffers() <= before - len(fresh) + 1 and torch.equal(held[0], ref[0])

    assert in_a_child(child) == 0
    for _ in range(2):  # the parent's kept mappings serve on, passed to children again
        for k, x in enumerate(loader):
            assert torch.equal(x, ref[k])
    assert in_a_child(lambda: torch.equal(held[0], ref[0])) == 0
    del loader, x
    held.clear()


def test_a_kept_buffer_is_sent_without_its_descriptor(
    fresh: kept_mappings.KeptMappings,
) -> None:
    pool = BufferPool(1 << 30, shared=True)
    data, slot = sent(pool)
    received = pickle.loads(data)
    assert torch.equal(received, PATTERN) and slot.counters[KEPT] == fresh.token
    del received
    taken = pool.take(SHAPE, torch.uint8)
    assert taken is not None and not taken[1]  # the same buffer again
    batch = taken[0].as_subclass(PooledBatch)
    batch._slot = slot
    _, (fd, *_rest) = batch_send._reduce_pooled(batch)
    assert fd is None  # no descriptor: the receiver has it mapped


def test_a_buffer_another_process_keeps_is_opened_through_proc(
    fresh: kept_mappings.KeptMappings,
) -> None:
    pool = BufferPool(1 << 30, shared=True)
    taken = pool.take(SHAPE, torch.uint8)
    assert taken is not None
    images = taken[0]
    images.copy_(PATTERN)
    slot = pool.slot_of(images)
    assert slot is not None
    slot.counters[KEPT] = 12345  # kept by some other receiver
    batch = images.as_subclass(PooledBatch)
    batch._slot = slot
    fn, (fd, buffer, dtype, layout) = batch_send._reduce_pooled(batch)
    assert fd is None
    received = fn(fd, buffer, dtype, layout)
    assert torch.equal(received, PATTERN) and fresh.misses == 1
    ident, sender, number, size, nbytes = buffer
    pid = sender[0]
    with pytest.raises(RuntimeError, match=f"process {pid}'s descriptor {number} is no longer"):
        fn(None, (ident ^ 1, sender, number, size, nbytes), dtype, layout)
    with pytest.raises(RuntimeError, match="cannot be opened here"):
        fn(None, (ident ^ 1, sender, 99999, size, nbytes), dtype, layout)


def test_a_buffer_retired_while_kept_unused_is_forgotten(
    fresh: kept_mappings.KeptMappings,
) -> None:
    pool = BufferPool(2 * slot_size(NBYTES), shared=True)  # room for two buffers
    data, slot = sent(pool)
    received = pickle.loads(data)
    del received  # kept, unused
    ident = int(slot.counters[IDENT])
    assert ident in fresh._kept
    for rows in (5, 6):  # other sizes: the pool forgets the first
        received = pickle.loads(sent(pool, (rows, 3, 16, 16))[0])
        del received
    assert slot.counters[RETIRED] == 1
    assert ident not in fresh._kept


def test_a_process_with_over_1024_descriptors_open_counts_the_release(
    fresh: kept_mappings.KeptMappings,
) -> None:
    """PyTorch's descriptor strategy asks for a high ``ulimit -n``: a pidfd over 1023."""
    fds: list[int] = []
    while not fds or fds[-1] < 1100:
        fds.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    try:
        data, slot = sent(BufferPool(1 << 30, shared=True))
        received = pickle.loads(data)
        assert torch.equal(received, PATTERN)
        del received
        assert slot.free()
    finally:
        for fd in fds:
            os.close(fd)


def test_a_buffer_its_pool_retired_is_forgotten_at_its_release(
    fresh: kept_mappings.KeptMappings,
) -> None:
    pool = BufferPool(1 << 30, shared=True)
    data, slot = sent(pool)
    received = pickle.loads(data)
    assert len(fresh) == 1
    slot.counters[RETIRED] = 1
    del received
    assert len(fresh) == 0
    data, other = sent(BufferPool(1 << 30, shared=True))
    received = pickle.loads(data)
    del received
    assert len(fresh) == 1  # not retired: kept
    assert int(other.counters[IDENT]) in fresh._kept


def test_over_the_bound_each_batch_is_mapped_for_itself(
    pets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    none_kept = kept_mappings.KeptMappings(0)
    monkeypatch.setattr(kept_mappings, "_KEPT", none_kept)
    loader, ref = _loader(pets, persistent_workers=True)
    for _ in range(3):
        for k, x in enumerate(loader):
            assert torch.equal(x, ref[k])
    assert none_kept.hits == 0 and none_kept.misses == 3 * len(ref) and len(none_kept) == 0
    del loader, x


@pytest.mark.parametrize("raw, expected", [("", 1024 << 20), ("0", 0), (" 64 ", 64 << 20)])
def test_the_bound_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: int
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_MAPPINGS_MIB", raw)
    assert kept_mappings.bound_bytes() == expected


@pytest.mark.parametrize("raw", ["-1", "lots", "1.5"])
def test_a_bad_bound_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_MAPPINGS_MIB", raw)
    with pytest.raises(ValueError, match="CDML_EDGE_BATCH_MAPPINGS_MIB"):
        kept_mappings.bound_bytes()


class _Cycle:
    """Freed only by a collection."""

    def __init__(self, batch: torch.Tensor) -> None:
        self.batch = batch
        self.me = self


def _a_collection_inside_a_release_releases_the_others() -> bool:
    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    messages = [sent(pool) for _ in range(4)]
    received = [pickle.loads(data) for data, _ in messages]
    for batch in received[1:]:
        _Cycle(batch)  # garbage in a cycle: freed by the next collection
    first = received[0]
    del received, batch
    real = kept.release

    def collecting(ident: int) -> None:  # a collection falls in here
        gc.collect()
        real(ident)

    kept.release = collecting  # type: ignore[method-assign]
    del first
    kept.release = real  # type: ignore[method-assign]
    gc.collect()
    return all(slot.free() for _, slot in messages) and len(kept) == 4


def test_a_collection_inside_a_release_releases_the_other_batches() -> None:
    code = in_a_child(_a_collection_inside_a_release_releases_the_others, timeout=30)
    assert code == 0


def _a_collection_inside_the_walk_over_the_kept() -> bool:
    """A receive walks the kept mappings; a collection there releases an ended worker's."""
    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    messages = [sent(pool) for _ in range(3)]
    received = [pickle.loads(data) for data, _ in messages[:2]]
    for batch in received:
        _Cycle(batch)
    del received, batch
    for entry in kept._kept.values():
        kept._sender_ended(entry.sender)  # as if its worker had ended
    real = kept._forget

    def collecting(ident: int) -> None:
        gc.collect()  # frees the batches in cycles: releases inside the walk
        real(ident)

    kept._forget = collecting  # type: ignore[method-assign]
    kept.release(next(iter(kept._kept)))  # one walk, with collections inside
    kept._forget = real  # type: ignore[method-assign]
    third = pickle.loads(messages[2][0])
    return torch.equal(third, PATTERN) and len(kept) == 1


def test_a_collection_inside_the_walk_over_the_kept_mappings() -> None:
    assert in_a_child(_a_collection_inside_the_walk_over_the_kept, timeout=30) == 0


def test_a_buffer_the_forks_own_sweep_releases_is_kept_out_of_that_child(
    fresh: kept_mappings.KeptMappings,
) -> None:
    data, slot = sent(BufferPool(1 << 30, shared=True))
    received = pickle.loads(data)
    address = received.untyped_storage().data_ptr()
    r, w = os.pipe()
    pid = os.fork()  # a first child while the batch is in use: its release waits for it
    if pid == 0:
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    del received
    gc.collect()
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)  # ended: the batch is released by the next fork's sweep
    ident = int(slot.counters[IDENT])
    assert fresh._kept[ident].in_use

    def child() -> bool:
        maps = Path("/proc/self/maps").read_text().splitlines()
        return not any(int(line.split("-")[0], 16) == address for line in maps)

    assert in_a_child(child) == 0
    assert not fresh._kept[ident].in_use


def test_a_new_worker_with_an_ended_ones_process_id_keeps_its_buffers(
    fresh: kept_mappings.KeptMappings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process ids are used again: a worker is its id and a word of its own."""
    pool = BufferPool(1 << 30, shared=True)
    old = pickle.loads(sent(pool)[0])  # held across the old worker's end
    (old_sender,) = {entry.sender for entry in fresh._kept.values()}
    fresh._sender_ended(old_sender)
    new_sender = (old_sender[0], old_sender[1] ^ 1)  # the same id, another process
    monkeypatch.setattr(batch_send, "_PROCESS_WORD", new_sender[1])
    data, slot = sent(pool)
    received = pickle.loads(data)
    del received  # released: its worker lives, so it is kept
    ident = int(slot.counters[IDENT])
    assert fresh._kept[ident].sender == new_sender
    del old  # the ended worker's: forgotten
    assert len(fresh) == 1 and ident in fresh._kept and old_sender not in fresh._senders


def test_a_persistent_loader_with_more_batch_sizes_than_its_pool_keeps(
    pets: Path, fresh: kept_mappings.KeptMappings
) -> None:
    """Five sizes (the pool keeps four): buffers the worker retired are not kept here."""
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8")
    sizes = [1, 2, 3, 4, 5]
    batches = [list(range(sum(sizes[:i]), sum(sizes[: i + 1]))) for i in range(len(sizes))]
    loader = DataLoader(
        ds, batch_sampler=batches, num_workers=1, persistent_workers=True, collate_fn=collate
    )
    for _ in range(10):
        assert sum(1 for _ in loader) == len(sizes)
    gc.collect()
    pid = loader._iterator._workers[0].pid  # type: ignore[union-attr]
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    in_worker = len({line.split()[4] for line in maps if "cdml-edge-batch" in line})
    assert 0 < len(fresh) <= in_worker
    del loader


def _a_smaller_file_under_the_number_is_refused() -> bool:
    pool = BufferPool(1 << 30, shared=True)
    taken = pool.take((16, 3, 32, 32), torch.uint8)  # many pages: its header far past 64 bytes
    assert taken is not None
    slot = pool.slot_of(taken[0])
    assert slot is not None
    slot.counters[KEPT] = 12345  # kept by another receiver: sent without a descriptor
    batch = taken[0].as_subclass(PooledBatch)
    batch._slot = slot
    fn, (_, buffer, dtype, layout) = batch_send._reduce_pooled(batch)
    ident, sender, _, size, nbytes = buffer
    small = os.memfd_create("small")
    os.ftruncate(small, 64)  # a smaller file under the number: mapped, it would fault
    try:
        fn(None, (ident, sender, small, size, nbytes), dtype, layout)
    except RuntimeError as e:
        return "no longer its batch buffer" in str(e)
    finally:
        os.close(small)
    return False


def test_a_smaller_file_under_the_descriptors_number_is_refused_not_read() -> None:
    assert in_a_child(_a_smaller_file_under_the_number_is_refused, timeout=30) == 0
