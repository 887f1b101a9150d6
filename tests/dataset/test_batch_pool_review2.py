"""A second hostile review of the batch pool: cases beyond test_batch_pool_review.py.

Each ``pool`` case fails on 2b7f24e; its ``no-pool`` twin (CDML_EDGE_BATCH_POOL_MIB=0,
PyTorch's own path) passes, so what breaks is the pool's doing.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.forked import in_a_child
from helpers.pool_review import (
    POOL,
    dataset,
    epochs,
    fork_each_epoch,
    kept_with_views,
    shuffled,
    wait_for_file,
)
from torch.utils.data import DataLoader, Dataset, default_collate

pytestmark = pytest.mark.usefixtures("collect_after")

# --- 1. Every fork inside a DataLoader worker passes for "a DataLoader worker's start" ----------
#
# buffer_release.starts_dataloader_worker() looks for torch/utils/data/dataloader.py on the
# calling thread's stack. A worker started by fork keeps its parent's stack below
# Process._bootstrap (dataloader.py's _MultiProcessingDataLoaderIter.__init__ -> w.start() ->
# Popen._launch -> os.fork -> _bootstrap -> _worker_loop), so in a worker that check is True
# for every fork: the user's own forks there retire nothing, in buffer_release or in the pool.


@POOL
def test_a_process_forked_by_the_collate_fn_in_a_worker_keeps_its_batch(
    pool_pets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """A collate_fn that forks a writer for the batch (an async cache, a logger).

    The forked process reads the batch after the worker has sent it and the main process has
    dropped it: the worker took the buffer again for a later batch.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    go, result = tmp_path / "go", tmp_path / "result"
    state = {"forked": False}

    def forking_collate(batch: list) -> torch.Tensor:  # type: ignore[type-arg]
        out = default_collate(batch)
        if not state["forked"]:  # the worker's first batch only
            state["forked"] = True
            expected = out.clone()
            if os.fork() == 0:  # the writer: reads ``out`` a little later
                wait_for_file(go)
                result.write_text("same" if torch.equal(out, expected) else "overwritten")
                os._exit(0)
        return out

    loader = shuffled(pool_pets, collate_fn=forking_collate)
    epochs(loader, 4)
    go.touch()
    wait_for_file(result)
    del loader
    assert result.read_text() == "same", "a batch forked with in a worker was overwritten"


@POOL
def test_a_fork_from_inside_a_num_workers_0_loader_retires_held_batches(
    pool_pets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """A fork by the dataset of a num_workers=0 loader while batches of another are held.

    The main process holds batches of a loader with workers (memfd mappings); the dataset of
    another loader with num_workers=0 forks (dataloader.py is on the stack). The fork is
    taken for a worker's start: the held batches are not retired, the parent's drop releases
    them, the worker writes new batches into them under the child's eyes.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    go, result = tmp_path / "go", tmp_path / "result"
    loader = shuffled(pool_pets)
    kept = list(loader)
    expected = [x.clone() for x in kept]

    class Forking(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int) -> int:
            if os.fork() == 0:
                wait_for_file(go)
                same = all(torch.equal(a, b) for a, b in zip(box[0], expected, strict=True))
                result.write_text("same" if same else "overwritten")
                os._exit(0)
            return i

    box = [kept]
    del kept
    list(DataLoader(Forking(), num_workers=0))
    box.clear()
    gc.collect()
    epochs(loader, 3)
    go.touch()
    wait_for_file(result)
    del loader
    assert result.read_text() == "same", "batches a forked child inherited were overwritten"


class _Replay(Dataset):  # type: ignore[type-arg]
    """Batches kept for replay; its length is fixed at construction."""

    def __init__(self, items: list[torch.Tensor]) -> None:
        self.items, self.n = items, len(items)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.items[i].clone()


@POOL
def test_a_dataloader_worker_that_inherited_held_batches_reads_them_intact(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """A replay loader's worker still reads the batches its copy of the replay list holds.

    A replay loader (persistent worker) over batches of a first loader; the main process
    then rolls its replay list over. The replay worker's copy of the list still holds them.

    A DataLoader worker's start retires nothing ("they run only the worker loop"), but the
    worker loop runs the user's dataset, which holds what the parent held at the fork.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    loader = shuffled(pool_pets)
    kept = list(loader)
    expected = [x.clone() for x in kept]
    replay = _Replay(kept)
    del kept
    replaying = DataLoader(replay, batch_size=None, num_workers=1, persistent_workers=True)
    first = list(replaying)  # its worker is forked now, with the replay list
    assert all(torch.equal(a, b) for a, b in zip(first, expected, strict=True))
    replay.items.clear()  # the main process rolls its replay buffer over
    gc.collect()
    epochs(loader, 3)
    second = list(replaying)
    same = [torch.equal(a, b) for a, b in zip(second, expected, strict=True)]
    del replaying, loader
    assert all(same), f"replayed batches equal to what was kept: {same}"


# --- 2. A fork drops the mapping a moved storage's NumPy view still reads (segfault) ------------
#
# After x.numpy() and x.share_memory_() (or a torch.multiprocessing queue), the old mapping of
# a received batch is kept alive only by ``buffer_release._moved`` (the release partial holds
# the counters array, which holds the mmap). ``_retire_at_fork`` (parent) and
# ``_forget_in_child`` (child) clear ``_moved``: the mmap is closed, the NumPy view reads
# unmapped memory. Likewise a fork *before* the move: the finalizer is detached, so when the
# storage moves nothing keeps the mapping. With PyTorch's path (no pool) a received batch is
# already shared: share_memory_ is a no-op, the view stays valid.


@POOL
@pytest.mark.parametrize("reader", ["parent", "child"])
def test_a_numpy_view_of_a_moved_batch_survives_a_later_fork(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str, reader: str
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)

    def scenario() -> bool:
        kept, views, expected = kept_with_views(pool_pets)
        for x in kept:
            x.share_memory_()  # or a torch.multiprocessing queue: the storage moves
        pid = os.fork()  # e.g. a multiprocessing 'fork' Process started afterwards
        if pid == 0:
            gc.collect()
            ok = reader == "parent" or all(
                np.array_equal(v, e) for v, e in zip(views, expected, strict=True)
            )
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        gc.collect()
        if os.waitstatus_to_exitcode(status) != 0:
            os._exit(100 - os.waitstatus_to_exitcode(status))  # 111: the grandchild's SIGSEGV
        return all(np.array_equal(v, e) for v, e in zip(views, expected, strict=True))

    code = in_a_child(scenario)
    assert code == 0, (
        f"numpy views of moved batches after a fork: exit code {code} (-11/111: SIGSEGV)"
    )


@POOL
def test_a_numpy_view_of_a_batch_moved_after_a_fork(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)

    def scenario() -> bool:
        kept, views, expected = kept_with_views(pool_pets)
        pid = os.fork()  # a fork while they are held: their watch is detached
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        for x in kept:
            x.share_memory_()  # the old memory: nothing keeps the mapping now
        gc.collect()
        return all(np.array_equal(v, e) for v, e in zip(views, expected, strict=True))

    code = in_a_child(scenario)
    assert code == 0, f"numpy views of batches moved after a fork: exit code {code}"


# --- 3. A size that can never fit empties the pool of every other size ---------------------------


def test_a_batch_too_big_for_the_bound_keeps_the_other_sizes() -> None:
    """``_room`` forgets the other sizes before knowing whether the new one fits at all.

    One oversized batch (an occasional large one, or a bound set small) costs every other
    size its buffers, and leaves an empty entry that counts towards MAX_SIZES.
    """
    from cdml_edge.data.batch_pool import BufferPool

    pool = BufferPool(1 << 20, shared=False)
    x, _ = pool.take((1000,), torch.uint8)  # type: ignore[misc]
    del x
    assert pool.take((2 << 20,), torch.uint8) is None  # bigger than the whole bound
    assert 1000 in pool._slots and len(pool._slots[1000]) == 1, pool._slots
    again = pool.take((1000,), torch.uint8)
    assert again is not None and not again[1], "the kept size's buffer was forgotten"


# --- 4. Forks of the main process retire worker buffers for good --------------------------------


def _buffer_fds(pid: int) -> Iterator[Path]:
    """The descriptors of process ``pid`` that are pool buffers."""
    for f in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if "cdml-edge-batch" in os.readlink(f):
                yield f
        except OSError:
            pass


def _stuck_buffers(pid: int) -> tuple[int, int]:
    """The pool buffers of ``pid`` sent and never released, read from their counters; all."""
    seen: dict[int, bool] = {}
    for f in _buffer_fds(pid):
        try:
            with open(f, "rb") as fh:
                fh.seek(-64, os.SEEK_END)
                _held, sent, released = np.frombuffer(fh.read(24), np.uint64)
            seen[f.stat().st_ino] = sent != released
        except OSError:
            pass
    return sum(seen.values()), len(seen)


def test_forks_of_the_main_process_do_not_use_up_the_workers_pool(pool_pets: Path) -> None:
    """Forks of the main process while it holds a batch leave the worker's pool unusable.

    The main process forks once per epoch (a checkpoint writer, an evaluation process)
    while it holds a batch: that batch's watch is detached, its release is never counted, and
    the worker never takes that buffer again, even after the child has exited.

    After MAX_PER_SIZE such forks every buffer of the size is stuck in the worker for good
    (held memory, 8 x the batch per worker and size), and every later batch takes the path
    the pool exists to avoid (fresh shared memory, faulted in anew).
    """
    loader = DataLoader(dataset(pool_pets), batch_size=2, num_workers=1, persistent_workers=True)
    fork_each_epoch(loader, 12)
    gc.collect()  # no batch alive in the main process, the epoch over, the child gone
    stuck, buffers = _stuck_buffers(loader._iterator._workers[0].pid)  # type: ignore[union-attr]
    del loader
    assert stuck == 0, f"{stuck} of the worker's {buffers} buffers sent and never released"


def _buffer_inodes(pid: int) -> set[int]:
    """The pool buffers ``pid`` holds a descriptor of, by inode."""
    inodes = set()
    for f in _buffer_fds(pid):
        with contextlib.suppress(OSError):
            inodes.add(f.stat().st_ino)
    return inodes


def test_the_next_fork_releases_what_waited_for_an_ended_child_and_passes_none_of_it_on(
    pool_pets: Path,
) -> None:
    """Batches held at a fork, then dropped; the child ended after; nothing received since.

    Their releases waited for a sweep, which runs only as batches are taken or received. The
    next fork (another loader's worker, an evaluation loader's at each epoch) inherited their
    mappings and descriptors, and they waited again, for that process's end: the first
    worker's buffers stayed taken while it lived, and every worker forked meanwhile held a
    descriptor of each.
    """
    first = DataLoader(dataset(pool_pets), batch_size=2, num_workers=1, persistent_workers=True)
    kept = list(first)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that ends after the parent dropped the batches
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    del kept
    gc.collect()
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)
    second = iter(DataLoader(dataset(pool_pets), batch_size=2, num_workers=1))  # a fork
    first_pid = first._iterator._workers[0].pid  # type: ignore[union-attr]
    second_pid = second._workers[0].pid  # type: ignore[attr-defined]
    stuck, buffers = _stuck_buffers(first_pid)
    passed_on = _buffer_inodes(first_pid) & _buffer_inodes(second_pid)
    del second, first
    assert stuck == 0, f"{stuck} of the first worker's {buffers} buffers never released"
    assert not passed_on, f"the new worker holds {len(passed_on)} of the first one's buffers"


def test_forks_of_the_main_process_do_not_use_up_its_private_pool(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_workers=0: a buffer held at a fork stays ``held`` for good, though private.

    The main process's buffers are private memory (copy-on-write at a fork), yet a fork
    detaches their watch too. Ten epochs with one fork each (a batch held): the buffers of
    the size get stuck one by one, until the pool hands out nothing more for it (every later
    batch is a fresh torch.empty, the eight buffers kept for nothing).
    """
    from cdml_edge.data import batch_pool

    monkeypatch.setattr(batch_pool, "_POOL", None)  # a pool of this test's own
    loader = DataLoader(dataset(pool_pets), batch_size=2, num_workers=0)
    fork_each_epoch(loader, 10)
    gc.collect()
    slots = batch_pool.pool()._slots[2 * 3 * 14 * 20]
    stuck = sum(not s.free() for s in slots)  # no batch is alive now: all should be free
    assert stuck == 0, f"{stuck} of {len(slots)} buffers still 'held' with no batch alive"
