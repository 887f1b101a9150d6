"""A third hostile review of the batch pool: the fork handling of buffer_release (1ae4f0c).

Each ``pool`` case fails on 1ae4f0c; where it has a ``no-pool`` twin
(CDML_EDGE_BATCH_POOL_MIB=0, PyTorch's own path), the twin passes.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers.forked import in_a_child
from helpers.pool_review import (
    POOL,
    dataset,
    epochs,
    shuffled,
    wait_for_file,
)
from torch.utils.data import DataLoader

from cdml_edge.data import buffer_release
from cdml_edge.data.batch_pool import BufferPool

pytestmark = pytest.mark.usefixtures("collect_after")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- 1. A batch held across forks keeps one pipe per fork open, after the children ended ---------
#
# _before_fork gives every shared entry watched at the fork the read end of a new pipe. That
# descriptor is closed only by _Fork.gone(), which only _Watched.over() calls, which calls it
# only once the entry is dropped (``self.dropped and ...`` short-circuits). A batch the main
# process keeps (a validation set cached from a worker loader, a fixed batch for plots) thus
# keeps one descriptor per fork of the process, however long ago that child ended: a
# non-persistent DataLoader with 8 workers leaks 8 per epoch, multiprocessing.Pool(8) 8 per
# Pool. Under the usual soft limit of 1024 the process then runs out of descriptors (and from
# there on every fork is _NEVER: what it saw is never released).


@POOL
def test_a_kept_batch_does_not_keep_a_descriptor_per_fork(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    kept = list(
        DataLoader(dataset(pool_pets), batch_size=2, num_workers=1)
    )  # cached, held for good
    before = _fds()
    for _ in range(200):  # e.g. 25 epochs of a non-persistent loader with 8 workers
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    epochs(DataLoader(dataset(pool_pets), batch_size=2, num_workers=1), 1)  # sweeps run
    buffer_release.sweep()
    grown = _fds() - before
    del kept
    assert grown < 20, f"{grown} descriptors more after 200 forks whose children all ended"


@POOL
def test_batches_dropped_after_the_last_sweep_do_not_keep_a_descriptor_per_fork(
    pool_pets: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    """Training is over: the last batches were dropped while a child ran, nothing sweeps again.

    Their entries stay in ``_watched`` (dropped, waiting); every later fork (a Pool for the
    post-processing, a process per report) gives each of them one more pipe, whose read end
    only a sweep() would close: none runs without a batch taken or received.
    """
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    last = list(DataLoader(dataset(pool_pets), batch_size=2, num_workers=1))
    r, w = os.pipe()
    pid = os.fork()  # e.g. a checkpoint writer, started while the last batches were held
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    del last
    gc.collect()  # dropped while the writer runs: they wait for it
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)
    before = _fds()
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    grown = _fds() - before
    buffer_release.sweep()
    assert grown < 20, f"{grown} descriptors more after 200 forks whose children all ended"


# --- 2. A child that closes the descriptors it inherited (a daemon) loses its batch -------------
#
# The parent's release waits for EOF on the pipe, i.e. for every holder of the write end to
# close it. A child that closes all its inherited descriptors (python-daemon's DaemonContext,
# ``os.closerange(3, ...)`` before running a long job, a double-fork daemonisation) closes the
# write end but keeps every mapping: the parent sees "gone", counts the release, and the worker
# writes later batches into the memory the child still reads. PyTorch's own path never writes a
# sent batch's memory again.


@POOL
def test_a_child_that_closes_its_descriptors_keeps_its_batch(
    pool_pets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool_mib: str
) -> None:
    monkeypatch.setenv("CDML_EDGE_BATCH_POOL_MIB", pool_mib)
    go, result = tmp_path / "go", tmp_path / "result"
    loader = shuffled(pool_pets)
    box = [list(loader)]
    expected = [x.clone() for x in box[0]]
    pid = os.fork()
    if pid == 0:  # a daemon writing the batches out later
        os.closerange(3, 65536)
        wait_for_file(go)
        same = all(torch.equal(a, b) for a, b in zip(box[0], expected, strict=True))
        result.write_text("same" if same else "overwritten")
        os._exit(0)
    box.clear()
    gc.collect()
    epochs(loader, 3)
    go.touch()
    os.waitpid(pid, 0)
    del loader
    assert result.read_text() == "same", "the daemon's batches were overwritten by the worker"


# --- 3. _lock held across the fork: lock-order inversion with other at-fork hooks -------------
#
# _before_fork takes buffer_release._lock at *every* fork (watched entries or not) and keeps it
# until the after-hooks. Before-hooks run in reverse order of registration, so the hooks of
# modules imported before cdml_edge (logging's, which takes logging's module lock) run after it,
# with _lock held. A thread that holds logging's lock and frees a batch meanwhile (a collection
# during logging.getLogger(), a handler dropping the last reference) waits for _lock in
# _dropped; the forking thread waits for logging's lock: both hang for good. Without the pool
# nothing takes a lock of its own around a fork.


def _fork_while_another_thread_holds_loggings_lock() -> bool:
    pool = BufferPool(1 << 20, shared=False)  # num_workers=0: a private buffer is enough
    taken = pool.take((4, 3, 8, 8), torch.uint8)
    assert taken is not None
    box = [taken[0]]
    del taken
    ready = threading.Event()

    def logging_thread() -> None:
        logging._acquireLock()  # type: ignore[attr-defined]
        try:
            ready.set()
            time.sleep(0.5)  # the main thread forks meanwhile
            box.clear()  # the batch is freed: _dropped
        finally:
            logging._releaseLock()  # type: ignore[attr-defined]

    t = threading.Thread(target=logging_thread)
    t.start()
    ready.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    t.join()
    return True


def test_a_fork_while_another_thread_holds_loggings_lock_does_not_hang() -> None:
    child = multiprocessing.get_context("fork").Process(
        target=lambda: os._exit(0 if _fork_while_another_thread_holds_loggings_lock() else 1)
    )
    child.start()
    child.join(20)
    hung = child.exitcode is None
    if hung:
        child.kill()
        child.join()
    assert not hung, "a fork deadlocked: _lock (buffer_release) against logging's module lock"
    assert child.exitcode == 0


# --- 4. A collection inside sweep() frees a watched batch: the dict changes under iteration ------
#
# sweep() (and _before_fork) iterate ``_watched`` with the RLock held; the lock is reentrant
# precisely because "a collection inside may free a watched array". Such a collection runs
# _dropped, which deletes its entry from ``_watched`` when it is over: the iteration then
# raises "dictionary changed size during iteration". ``_Watched.over()`` allocates a generator
# (``all(f.gone() for f in self.forks)``) for any entry that waits for a fork, so a collection
# can run right there. sweep() is run by BufferPool.take (a batch's decode: the worker's
# __getitem__ fails) and by batch_send.rebuild (the main process's unpickling of a batch).


def _sweep_with_a_collection_at(threshold: int) -> str:
    """sweep() with 4 entries waiting for a child and a batch in a cycle; gen0 at ``threshold``."""
    pool = BufferPool(1 << 24, shared=True)
    waiting = [pool.take((64 + i,), torch.uint8)[0] for i in range(4)]  # type: ignore[index]
    r, w = os.pipe()
    pid = os.fork()  # a child that may read them
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    del waiting  # they wait for the child: their entries stay in _watched, looked at by sweep()
    cyclic, _ = pool.take((4096,), torch.uint8)  # type: ignore[misc]
    gc.collect()
    gc.set_threshold(threshold)  # where in sweep() the next collection falls
    cycle: list[object] = [cyclic]
    cycle.append(cycle)  # freed only by a collection
    del cyclic, cycle
    try:
        buffer_release.sweep()
        return ""
    except RuntimeError as e:
        return f"threshold {threshold}: sweep() raised {e!r}"
    finally:
        gc.set_threshold(700)
        os.write(w, b"x")
        os.waitpid(pid, 0)
        gc.collect()
        buffer_release.sweep()


def _sweeps_with_a_collection_inside() -> bool:
    errors = [e for e in map(_sweep_with_a_collection_at, range(1, 30)) if e]
    print(errors)
    return not errors


def test_a_collection_inside_sweep_does_not_break_it(capfd: pytest.CaptureFixture[str]) -> None:
    code = in_a_child(_sweeps_with_a_collection_inside)
    assert code == 0, capfd.readouterr().out


# --- 5. A fork inside sweep() (a finalizer that forks): the child finishes the parent's sweep ---
#
# sweep() reads ``pid = os.getpid()`` once, then iterates. A collection during the iteration
# (the generator of _Watched.over(), as in 4.) may run a finalizer or weakref callback that
# forks (a weakref.finalize that starts a writer process, multiprocessing's own finalizers).
# The child comes back into the parent's sweep() with the parent's pid: _after_in_child has
# marked every inherited fork over, so the child takes the parent's dropped entries as its own
# and releases them: ``released`` is counted in the worker's buffer by the child *and* by the
# parent (sent 1, released 2: the next batch sent in that buffer is taken as released already,
# and the worker overwrites it while the main process holds it). And a _Fork whose gone() was
# under way when the child closed its descriptor polls that closed number (POLLNVAL counts as
# readable) and closes it again: EBADF here, another file's descriptor once the number is
# reused.


def _received_batches(pool: BufferPool, n: int) -> tuple[list[torch.Tensor], list[object]]:
    """``n`` pool buffers sent as a worker sends them, and received (mapped) here."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    from cdml_edge.data.batch_send import PooledBatch

    received, slots = [], []
    for i in range(n):
        images, _ = pool.take((256 + 64 * i,), torch.uint8)  # type: ignore[misc]
        slot = pool.slot_of(images)
        batch = images.as_subclass(PooledBatch)
        batch._slot = slot
        received.append(pickle.loads(bytes(ForkingPickler.dumps(batch))))
        slots.append(slot)
        del images, batch
    return received, slots


def _fork_inside_sweep(pad: int) -> list[str]:
    import weakref

    pool = BufferPool(1 << 24, shared=True)
    received, slots = _received_batches(pool, 6)
    r, w = os.pipe()
    pid0 = os.fork()  # a child that may read them, for a while
    if pid0 == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    del received  # dropped: they wait for pid0
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid0, 0)  # pid0 is gone: the next sweep() releases them
    parent, kids = os.getpid(), []

    class Holder:
        pass

    def fork_a_writer() -> None:  # a finalizer that starts a process
        p = os.fork()
        if p:
            kids.append(p)

    gc.collect()
    gc.set_threshold(20)
    h = Holder()
    h.self = h  # type: ignore[attr-defined]
    weakref.finalize(h, fork_a_writer)
    del h
    padding = [[] for _ in range(pad)]  # where in sweep() the collection falls
    try:
        buffer_release.sweep()
    except Exception:
        if os.getpid() != parent:
            os._exit(3)
        raise
    finally:
        gc.set_threshold(700)
    if os.getpid() != parent:
        os._exit(0)  # the forked writer
    del padding
    problems = []
    for kid in kids:
        _, status = os.waitpid(kid, 0)
        if os.waitstatus_to_exitcode(status) == 3:
            problems.append(f"pad {pad}: the child's sweep() raised")
    gc.collect()
    buffer_release.sweep()
    for slot in slots:
        _held, sent, released = (int(v) for v in slot.counters[:3])  # type: ignore[attr-defined]
        if released != sent:
            problems.append(f"pad {pad}: sent {sent}, released {released}")
            break
    return problems


def _forks_inside_sweep() -> bool:
    problems = [p for pad in range(12) for p in _fork_inside_sweep(pad)]
    print(problems)
    return not problems


def test_a_fork_inside_sweep_does_not_release_the_parents_batches_in_the_child(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = in_a_child(_forks_inside_sweep)
    assert code == 0, capfd.readouterr().out
