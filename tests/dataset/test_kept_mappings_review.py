"""Kept mappings under threads, forks and collections (a second hostile review's cases)."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.forked import in_a_child
from helpers.pooled import PATTERN, sent

from cdml_edge.data import kept_mappings
from cdml_edge.data.batch_pool import BufferPool


def _a_watched_process_ends(kept: kept_mappings.KeptMappings) -> None:
    """A child, watched by the kept mappings' thread, ends: that thread handles its end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    assert kept._ends.watch((pid, 0), pid) == "watching"
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)


class _Cycle:
    def __init__(self, batch: torch.Tensor) -> None:
        self.batch = batch
        self.me = self


def _collection_in_the_watching_thread_while_another_releases() -> bool:
    """A collection in the watching thread, under the kept lock, while this thread releases.

    The collection releases a batch there; this thread's release wants the kept lock. A
    lock around the count taken before the kept lock in one path and after it in the
    other hung both.
    """
    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    messages = [sent(pool) for _ in range(2)]
    b, c = (pickle.loads(data) for data, _ in messages)
    _Cycle(c)  # garbage: freed by the next collection, wherever it runs
    del c

    a_holds_kept = threading.Event()
    b_holds_count = threading.Event()
    real_forget_gone, real_release = kept._forget_gone, kept.release

    def forget_gone() -> None:
        if threading.current_thread().name == "cdml-batch-senders":
            a_holds_kept.set()
            b_holds_count.wait(5)
            time.sleep(0.2)  # B is now blocked on the kept lock
            gc.collect()  # a collection in the watching thread, under the kept lock
        real_forget_gone()

    def release(ident: int) -> None:  # this thread's release, on its way to the kept lock
        b_holds_count.set()
        real_release(ident)

    kept._forget_gone = forget_gone  # type: ignore[method-assign]
    kept.release = release  # type: ignore[method-assign]
    # a process that ends: the real watching thread calls on_end for it
    _a_watched_process_ends(kept)
    assert a_holds_kept.wait(5)
    del b  # an ordinary release in this thread: hangs here
    kept._forget_gone, kept.release = real_forget_gone, real_release  # type: ignore[method-assign]
    gc.collect()
    return all(slot.free() for _, slot in messages)


def test_a_collection_in_the_watching_thread_while_another_thread_releases() -> None:
    code = in_a_child(_collection_in_the_watching_thread_while_another_releases, timeout=20)
    assert code == 0


def _pidfds() -> int:
    import contextlib
    from pathlib import Path

    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == "anon_inode:[pidfd]"
    return count


def _mapped_buffers() -> int:
    from pathlib import Path

    return Path("/proc/self/maps").read_text().count("cdml-edge-batch")


def test_many_loaders_created_and_dropped_leave_one_thread_and_no_pidfds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.dataset_data import class_images, write
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset
    from cdml_edge.data import buffer_release, collate

    fresh = kept_mappings.KeptMappings(kept_mappings.bound_bytes())
    monkeypatch.setattr(kept_mappings, "_KEPT", fresh)
    pets = write(tmp_path / "pets.zip", class_images(6))
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8")
    before_fds, before_maps = _pidfds(), _mapped_buffers()
    names = lambda: sum(t.name == "cdml-batch-senders" for t in threading.enumerate())  # noqa: E731
    threads = names()
    for k in range(6):
        persistent = bool(k % 2)
        loader = DataLoader(
            ds, batch_size=2, num_workers=2, collate_fn=collate, persistent_workers=persistent
        )
        for _ in range(2):
            held = list(loader)
        workers = list(loader._iterator._workers) if persistent else []  # type: ignore[union-attr]
        del loader, held
        for w in workers:
            w.join(10)
    gc.collect()
    buffer_release.sweep()
    deadline = time.monotonic() + 10
    while (len(fresh) or _pidfds() != before_fds) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert names() <= threads + 1
    assert (len(fresh), _pidfds(), _mapped_buffers()) == (0, before_fds, before_maps)
    assert fresh._senders == set() and fresh._ended == set() and fresh._ends._keys == {}
    from pathlib import Path

    links = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            links.append(os.readlink(fd))
    assert not [link for link in links if "cdml-edge-batch" in link]  # no memfd held here


def _processes_ending(
    kept: kept_mappings.KeptMappings, stop: float, found: list[int]
) -> threading.Thread:
    """A thread forking short-lived children, 20 at a time, watched as they end.

    Until ``stop`` or something is ``found``: the watching thread closes their process
    descriptors meanwhile.
    """

    def run() -> None:
        while time.monotonic() < stop and not found:
            pids = []
            for _ in range(20):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                pids.append(pid)
            for pid in pids:
                kept._ends.watch((pid, 1), pid)
            for pid in pids:
                os.waitpid(pid, 0)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _forks_while_watched_processes_end() -> bool:
    """Forks while the watching thread closes the descriptors of ended processes.

    A fork between its close and its forget left the child a closed (or reused) number: the
    child's hook failed on it and the child kept the parent's kept mappings.
    """
    kept = kept_mappings.kept_mappings()
    stop = time.monotonic() + 10
    bad: list[int] = []

    thread = _processes_ending(kept, stop, bad)
    while time.monotonic() < stop and not bad:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(w, b"0" if kept_mappings._KEPT is None else b"1")
            os._exit(0)
        os.close(w)
        if os.read(r, 1) == b"1":
            bad.append(pid)
        os.close(r)
        os.waitpid(pid, 0)
    thread.join()
    return not bad


def test_a_fork_while_watched_processes_end_starts_the_child_with_nothing_kept() -> None:
    assert in_a_child(_forks_while_watched_processes_end, timeout=60) == 0


class _Keys(dict[int, tuple[int, int]]):
    """ProcessEnds._keys: a collection in the watching thread while it holds its lock."""

    def __init__(self, inside: threading.Event) -> None:
        super().__init__()
        self.inside = inside

    def pop(self, *args: Any) -> Any:
        if threading.current_thread().name == "cdml-batch-senders":
            self.inside.set()
            time.sleep(0.5)  # the receiving thread is in add() now, holding the kept lock
            gc.collect()
        return super().pop(*args)


def _collection_in_the_watching_thread_while_a_new_worker_is_received() -> bool:
    """A new worker's first batch received while the watching thread collects under its lock.

    Watching the new worker under the kept lock, while the watcher's collection released a
    batch (the kept lock) under the watcher's lock, hung both.
    """
    from cdml_edge.data import batch_send

    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    garbage = pickle.loads(sent(pool)[0])
    _Cycle(garbage)
    del garbage
    inside = threading.Event()
    kept._ends._keys = _Keys(inside)
    _a_watched_process_ends(kept)
    assert inside.wait(5)
    batch_send._PROCESS_WORD ^= 1  # a new worker (a new sender) whose first batch comes now
    received = pickle.loads(sent(pool)[0])  # hangs in add() -> watch()
    return torch.equal(received, PATTERN)


def test_a_collection_in_the_watching_thread_while_a_new_worker_is_received() -> None:
    code = in_a_child(_collection_in_the_watching_thread_while_a_new_worker_is_received, timeout=20)
    assert code == 0


def test_a_small_bound_keeps_what_fits_and_its_accounting_returns_to_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.dataset_data import class_images, write
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset
    from cdml_edge.data import collate
    from cdml_edge.data.batch_pool import slot_size

    pets = write(tmp_path / "pets.zip", class_images(6))
    ds = CDMLStreamDataset(pets, is_image=True, target_size=(20, 14), image_dtype="uint8")
    ref = [x.clone() for x in DataLoader(ds, batch_size=2, collate_fn=collate)]
    size = slot_size(ref[0].numel())
    small = kept_mappings.KeptMappings(size + size // 2)  # one buffer fits, not two
    monkeypatch.setattr(kept_mappings, "_KEPT", small)
    loader = DataLoader(
        ds, batch_size=2, num_workers=2, collate_fn=collate, persistent_workers=True
    )
    for _ in range(4):
        for k, x in enumerate(loader):
            assert torch.equal(x, ref[k])
        assert small._bytes <= small.max_bytes and len(small) <= 1
    del x
    assert small.hits > 0
    workers = list(loader._iterator._workers)  # type: ignore[union-attr]
    del loader
    for w in workers:
        w.join(10)
    deadline = time.monotonic() + 10
    while len(small) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (len(small), small._bytes, small._senders) == (0, 0, set())


def _a_child_forked_while_processes_end_forks_in_turn() -> bool:
    """A child forked while watched processes end can fork in turn.

    The child of such a fork kept the parent's kept mappings, whose unused ones were kept
    out of it; its own fork read one of them: a segmentation fault.
    """
    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    unused = pickle.loads(sent(pool)[0])
    del unused  # kept, unused: MADV_DONTFORK at each fork
    assert len(kept) == 1
    stop = time.monotonic() + 10
    crashed: list[int] = []

    thread = _processes_ending(kept, stop, crashed)
    while time.monotonic() < stop and not crashed:
        pid = os.fork()
        if pid == 0:
            grandchild = os.fork()  # the child forks in turn
            if grandchild == 0:
                os._exit(0)
            os.waitpid(grandchild, 0)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            crashed.append(os.WTERMSIG(status))
    thread.join()
    if crashed:
        print("child killed by signal", crashed)
    return not crashed


def test_a_child_forked_while_watched_processes_end_can_fork() -> None:
    assert in_a_child(_a_child_forked_while_processes_end_forks_in_turn, timeout=60) == 0


def _a_thread_receives_while_another_drops_a_batch() -> bool:
    """One thread receives (as pin_memory's does) while another drops a batch.

    A collection inside the receive's kept lock releases a batch, while the other thread's
    release waits for the kept lock: a lock around the count taken in both orders hung them.
    """
    kept = kept_mappings.kept_mappings()
    pool = BufferPool(1 << 30, shared=True)
    messages = [sent(pool) for _ in range(3)]
    b, c = (pickle.loads(data) for data, _ in messages[:2])
    _Cycle(c)
    del c
    in_add, b_holds_count = threading.Event(), threading.Event()
    real_forget_gone, real_release = kept._forget_gone, kept.release

    def forget_gone() -> None:
        if threading.current_thread().name == "receiver":
            in_add.set()
            b_holds_count.wait(5)
            time.sleep(0.2)
            gc.collect()  # a collection while receiving, under the kept lock
        real_forget_gone()

    def release(ident: int) -> None:
        b_holds_count.set()
        real_release(ident)

    kept._forget_gone = forget_gone  # type: ignore[method-assign]
    kept.release = release  # type: ignore[method-assign]
    got: list[torch.Tensor] = []
    receiver = threading.Thread(
        target=lambda: got.append(pickle.loads(messages[2][0])), name="receiver", daemon=True
    )
    receiver.start()
    assert in_add.wait(5)
    del b  # hangs
    receiver.join()
    kept._forget_gone, kept.release = real_forget_gone, real_release  # type: ignore[method-assign]
    return torch.equal(got[0], PATTERN)


def test_a_thread_receives_while_another_drops_a_batch() -> None:
    assert in_a_child(_a_thread_receives_while_another_drops_a_batch, timeout=20) == 0
