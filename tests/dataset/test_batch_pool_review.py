"""A hostile review's cases of the batch pool: each broke a held batch or a resource once."""

from __future__ import annotations

import gc
import io
import os
import resource
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.forked import in_a_child
from helpers.pool_review import (
    POOL,
    dataset,
    epochs,
    shuffled,
)
from torch.utils.data import DataLoader, default_collate

from cdml_edge import CDMLStreamDataset

pytestmark = pytest.mark.usefixtures("collect_after")


@POOL
def test_a_forked_child_reading_an_inherited_batch_after_the_parent_drops_it(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """multiprocessing 'fork' / os.fork: the child still uses the batch the parent let go."""
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    loader = shuffled(pool_pets)
    kept = list(loader)
    expected = [x.clone() for x in kept]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits, then reads the batches it inherited
        os.close(w)
        os.read(r, 1)
        same = all(torch.equal(x, e) for x, e in zip(kept, expected, strict=True))
        os._exit(0 if same else 1)
    os.close(r)
    del kept
    gc.collect()
    epochs(loader, 3)  # the worker decodes new batches (a new order) into free buffers
    os.write(w, b"x")
    _, status = os.waitpid(pid, 0)
    del loader
    assert os.waitstatus_to_exitcode(status) == 0, "the child's inherited batches were overwritten"


@POOL
@pytest.mark.parametrize("send", ["share_memory_", "queue"])
def test_a_numpy_view_of_a_batch_that_is_then_shared_with_another_process(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str, send: str
) -> None:
    """``x.numpy()`` then ``x.share_memory_()`` / a torch.multiprocessing queue.

    Sharing copies a pooled batch into new shared memory and drops the old memory, while the
    NumPy view made before still reads the old address. It was released then: the worker
    filled the buffer again (other values), or the mapping was gone (a segmentation fault).
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)

    def scenario() -> bool:
        loader = shuffled(pool_pets)
        kept = list(loader)
        views = [x.numpy() for x in kept]
        expected = [v.copy() for v in views]
        if send == "share_memory_":
            for x in kept:
                x.share_memory_()
        else:
            q = torch.multiprocessing.get_context("fork").SimpleQueue()
            for x in kept:
                q.put(x)
            got = [q.get() for _ in kept]
            del got
        epochs(loader, 3)
        return all(np.array_equal(v, e) for v, e in zip(views, expected, strict=True))

    code = in_a_child(scenario)
    assert code == 0, f"numpy views of kept batches: {'overwritten' if code == 1 else code}"


def _lower_nofile(_: int) -> None:
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )


class _Sizes:
    """Batches of sizes 1..n (indices wrap around the 12 images)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):  # type: ignore[no-untyped-def]
        for size in range(1, self.n + 1):
            yield [i % 12 for i in range(size)]

    def __len__(self) -> int:
        return self.n


@POOL
def test_many_batch_sizes_do_not_exhaust_the_workers_descriptors(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """A batch_sampler of 600 sizes, under the usual soft limit of 1024 descriptors.

    Every size kept its memfds (two descriptors each) until 256 MiB of them were pooled:
    the worker failed with 'Too many open files'.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    ds = CDMLStreamDataset(pool_pets, is_image=True, target_size=(4, 4), image_dtype="uint8")
    loader = DataLoader(ds, batch_sampler=_Sizes(600), num_workers=1, worker_init_fn=_lower_nofile)
    try:
        n = sum(1 for _ in loader)
    except OSError as e:
        raise AssertionError(f"the worker ran out of descriptors: {e}") from None
    assert n == 600


def _saving_collate(batch: list) -> tuple[torch.Tensor, bytes]:  # type: ignore[type-arg]
    """A collate that also keeps the batch on disk (a cache), as users do in workers."""
    out = default_collate(batch)
    buf = io.BytesIO()
    torch.save(out, buf)
    return out, buf.getvalue()


@POOL
def test_torch_save_of_a_batch_in_a_worker(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """torch.save of the default-collated batch inside a worker saves the data.

    It saved a descriptor handle (multiprocessing DupFd), and counted a send never released.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    loader = DataLoader(dataset(pool_pets), batch_size=2, num_workers=1, collate_fn=_saving_collate)
    got = list(loader)
    del loader  # the worker is gone
    x, saved = got[0]
    x = x.clone()
    del got
    try:
        loaded = torch.load(io.BytesIO(saved), weights_only=False)
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"a batch saved in a worker does not load: {e!r}") from None
    assert torch.equal(loaded, x)


def _transposing_collate(batch: list) -> torch.Tensor:  # type: ignore[type-arg]
    """A collate that lays the batch out H/W-swapped in place, as a user's collate may."""
    out = default_collate(batch)
    out.transpose_(2, 3)
    return out


def _shrinking_collate(batch: list) -> torch.Tensor:  # type: ignore[type-arg]
    """A collate that keeps only the second half of the batch, in place."""
    out = default_collate(batch)
    n = out.shape[0] // 2
    out.set_(out.untyped_storage(), out[n:].storage_offset(), out[n:].shape, out[n:].stride())
    return out


@POOL
@pytest.mark.parametrize("collate_fn", [_transposing_collate, _shrinking_collate])
def test_a_batch_changed_in_place_in_the_worker_arrives_as_it_was_left(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str, collate_fn: object
) -> None:
    """An in-place ``transpose_`` / ``set_`` on the collated batch arrives as it was left.

    Only shape and dtype were sent: the main process read the buffer from its start.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    ref = list(DataLoader(dataset(pool_pets), batch_size=4, collate_fn=collate_fn))
    got = list(DataLoader(dataset(pool_pets), batch_size=4, num_workers=1, collate_fn=collate_fn))
    same = [torch.equal(g, r) for g, r in zip(got, ref, strict=True)]
    del got
    assert all(same), f"batches equal to the num_workers=0 ones: {same}"


def test_the_pool_stays_within_its_bound() -> None:
    """A buffer takes its data rounded up to 64 bytes, plus 64 of counters: all of it counts."""
    from cdml_edge.data.batch_pool import BufferPool

    assert BufferPool(100, shared=False).take((1,), torch.uint8) is None  # 128 bytes
    pool = BufferPool(128, shared=False)
    assert pool.take((1,), torch.uint8) is not None
    assert pool._bytes == 128


@pytest.mark.parametrize("module, lock", [("buffer_release", "_lock")])  # the count takes none
def test_a_forked_child_can_release_its_own_batches(
    pool_pets: Path, module: str, lock: str
) -> None:
    """A lock of the release path held by another thread at a fork is not inherited held.

    (The pin-memory thread dropping a batch.) The child's first own release, a batch of a
    DataLoader it runs, blocked forever.
    """
    import importlib
    import threading
    import time

    mod = importlib.import_module(f"cdml_edge.data.{module}")
    held, go = threading.Event(), threading.Event()

    def pin_thread_releasing() -> None:  # stands for a thread inside a release
        with getattr(mod, lock):
            held.set()
            go.wait(10)

    t = threading.Thread(target=pin_thread_releasing)
    t.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:
        import faulthandler

        faulthandler.dump_traceback_later(15, exit=True)  # a hang: the stacks, exit code 1
        for x in DataLoader(dataset(pool_pets), batch_size=2, num_workers=1):
            del x
        os._exit(0)
    go.set()
    t.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child hung in a release"
