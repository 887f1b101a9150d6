"""Kept mappings: memory safety and wrong bytes (a third hostile review's cases)."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest
import torch
from helpers.forked import in_a_child, in_a_fresh_interpreter
from helpers.pooled import PATTERN, SHAPE, sent

from cdml_edge.data import kept_mappings
from cdml_edge.data.batch_pool import KEPT, BufferPool


def _a_batch_in_flight_when_its_pool_retires_the_buffer(smaller: bool) -> bool:
    """A worker sends a kept buffer (no descriptor), then retires it before it is received.

    The worker's pool forgets the buffer's size (a fifth size) while the batch waits in the
    queue: the Slot goes, its descriptor closes, and a new size's memfd gets that number.
    The main process forgets the unused retired mapping at its next release, then receives
    the batch: /proc/<worker>/fd/<n> is another buffer now (smaller: SIGBUS reading the
    header; larger: "no longer its batch buffer"; none: "cannot be opened here").
    """
    kept_mappings._KEPT = kept_mappings.KeptMappings(1 << 30)
    pool = BufferPool(1 << 30, shared=True)
    big = (8, 3, 32, 32)  # the buffer retired while in flight
    pickle.loads(sent(pool, big)[0])  # received, dropped: kept unused, KEPT set
    in_flight, slot = sent(pool, big)  # the same buffer again: no descriptor, its number
    assert slot.counters[KEPT]
    number = slot.fd
    del slot
    first = pickle.loads(sent(pool, (1, 1, 1, 64))[0])  # another size: kept, in use
    held = [pool.take((1, 1, 1, n), torch.uint8) for n in (128, 192)]
    new = pool.take((1, 1, 1, 32) if smaller else (16, 3, 32, 32), torch.uint8)  # a 5th size
    assert new is not None
    new_slot = pool.slot_of(new[0])
    print("in flight: descriptor", number, "; the new size's:", new_slot and new_slot.fd)
    del first  # a release: the main process forgets the retired, unused buffer
    received = pickle.loads(in_flight)  # the batch in flight is received now
    ok = torch.equal(received, torch.ones(big, dtype=torch.uint8))
    del held, received
    return ok


@pytest.mark.parametrize("smaller", [True, False])
def test_a_batch_in_flight_when_its_pool_retires_the_buffer(smaller: bool) -> None:
    assert in_a_child(lambda: _a_batch_in_flight_when_its_pool_retires_the_buffer(smaller), 60) == 0


def _a_loader_whose_worker_pool_retires_buffers_in_flight(root: str) -> bool:
    """A worker's pool retires a buffer while a batch of it waits in the queue.

    Twelve batches of 6 images, then four other sizes (1-4): the fifth size retires the
    6-image buffers while one, sent over a kept buffer (no descriptor), waits in the queue.
    """
    import time
    from pathlib import Path

    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset
    from cdml_edge.data import collate

    kept_mappings._KEPT = None
    ds = CDMLStreamDataset(Path(root), is_image=True, target_size=(64, 64), image_dtype="uint8")
    batches, i = [], 0
    for n in [6] * 12 + [1, 2, 3, 4]:
        batches.append(list(range(i % len(ds), i % len(ds) + n)))
        i += n
    ref = [x.clone() for x in DataLoader(ds, batch_sampler=batches, collate_fn=collate)]
    loader = DataLoader(
        ds, batch_sampler=batches, num_workers=1, prefetch_factor=5, collate_fn=collate
    )
    for _ in range(4):  # timing: each epoch (a new worker) fails about half the time
        it = iter(loader)
        for k in range(len(batches)):
            x = next(it)
            if not torch.equal(x, ref[k]):
                print("wrong bytes in batch", k)
                return False
            del x
            time.sleep(0.05)  # the worker runs ahead: its batches wait in the queue
        del it
    print("kept hits", kept_mappings.kept_mappings().hits)
    return True


def test_a_loader_whose_worker_pool_retires_buffers_in_flight(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from helpers.dataset_data import class_images, write

    root = write(tmp_path / "pets.zip", class_images(12))
    scenario = "_a_loader_whose_worker_pool_retires_buffers_in_flight"
    assert in_a_fresh_interpreter(__file__, scenario, str(root), timeout=120) == 0


def _derived_objects_keep_the_buffer_taken() -> bool:
    """What is made from a batch keeps its buffer taken, and mapped, while it reads it.

    Views, .numpy(), share_memory_(), a re-pickle with ForkingPickler, as_strided, a slice
    of a dropped batch.
    """
    from multiprocessing.reduction import ForkingPickler

    kept_mappings._KEPT = kept_mappings.KeptMappings(1 << 30)
    pool = BufferPool(1 << 30, shared=True)
    cases = {
        "view": lambda b: b[1:3, 1],
        "numpy": lambda b: b.numpy(),
        "numpy then share_memory_": lambda b: (b.numpy(), b.share_memory_())[0],
        "numpy then ForkingPickler": lambda b: (b.numpy(), bytes(ForkingPickler.dumps(b)))[0],
        "as_strided": lambda b: b.as_strided((2, 2), (1, 1), 5).numpy(),
        "slice numpy": lambda b: b[2:].numpy()[0],
        "numpy slice of view": lambda b: b.view(-1)[100:].numpy(),
        "dlpack": lambda b: np.from_dlpack(b),
    }
    import numpy as np

    ok = True
    for name, derive in cases.items():
        data, slot = sent(pool)
        batch = pickle.loads(data)
        expect = PATTERN.numpy().copy() if "then" in name else np.array(derive(PATTERN.clone()))
        derived = derive(batch)
        del batch
        gc.collect()
        from cdml_edge.data import buffer_release

        buffer_release.sweep()
        if slot.free():
            print(name, ": buffer free while an object derived from the batch reads it")
            ok = False
        np.asarray(slot.tensor(SHAPE, torch.uint8) if slot.free() else 0)  # would overwrite
        if not np.array_equal(np.asarray(derived), expect):
            print(name, ": wrong bytes")
            ok = False
        del derived
        gc.collect()
        buffer_release.sweep()
        if not slot.free():
            print(name, ": never released")
            ok = False
        del slot
    return ok


def test_derived_objects_keep_the_buffer_taken() -> None:
    assert in_a_child(_derived_objects_keep_the_buffer_taken, 60) == 0


def _many_workers_out_of_order_one_batch_kept_ten_epochs(root: str, persistent: bool) -> bool:
    import warnings
    from pathlib import Path

    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset
    from cdml_edge.data import collate

    kept_mappings._KEPT = None
    warnings.simplefilter("ignore")
    ds = CDMLStreamDataset(Path(root), is_image=True, target_size=(20, 14), image_dtype="uint8")
    ref = [x.clone() for x in DataLoader(ds, batch_size=2, collate_fn=collate)]
    loader = DataLoader(
        ds,
        batch_size=2,
        num_workers=4,
        prefetch_factor=4,
        in_order=False,
        pin_memory=True,
        persistent_workers=persistent,
        collate_fn=collate,
    )
    kept_batch, kept_view, kept_np = None, None, None
    for epoch in range(10):
        seen = 0
        for x in loader:
            if not any(torch.equal(x, r) for r in ref):
                print("epoch", epoch, "wrong bytes")
                return False
            seen += 1
            if kept_batch is None:
                kept_batch, kept_view, kept_np = x, x[1:], x.numpy()[:1]
                kept_copy = x.clone()
        if seen != len(ref):
            return False
        if not (
            torch.equal(kept_batch, kept_copy)
            and torch.equal(kept_view, kept_copy[1:])
            and np.array_equal(kept_np, kept_copy.numpy()[:1])
        ):
            print("epoch", epoch, "the kept batch changed")
            return False
    print("hits", kept_mappings.kept_mappings().hits)
    return True


@pytest.mark.parametrize("persistent", [False, True])
def test_many_workers_out_of_order_one_batch_kept_ten_epochs(tmp_path, persistent) -> None:  # type: ignore[no-untyped-def]
    from helpers.dataset_data import class_images, write

    root = write(tmp_path / "pets.zip", class_images(6))
    assert (
        in_a_child(
            lambda: _many_workers_out_of_order_one_batch_kept_ten_epochs(str(root), persistent), 240
        )
        == 0
    )


def _forks_while_a_thread_receives_and_drops_batches() -> bool:
    """Forks while another thread receives and drops batches: each child reads its own.

    Thread B receives a kept buffer's batch and drops it, over and over; this thread forks,
    and each child reads whatever batch (and NumPy view of it) it inherited.
    """
    import threading

    kept_mappings._KEPT = kept_mappings.KeptMappings(1 << 30)
    pool = BufferPool(1 << 30, shared=True)
    box: list = [None, None]
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            data, slot = sent(pool)
            batch = pickle.loads(data)
            box[0], box[1] = batch, batch[1:].numpy()
            box[0] = box[1] = None
            del batch, slot

    t = threading.Thread(target=receive)
    t.start()
    bad = 0
    try:
        for _ in range(300):
            pid = os.fork()
            if pid == 0:
                b, v = box[0], box[1]
                ok = (b is None or torch.equal(b, PATTERN)) and (
                    v is None or np.array_equal(v, PATTERN[1:].numpy())
                )
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            bad += status != 0
    finally:
        stop.set()
        t.join()
    print("children that failed or crashed:", bad, "hits", kept_mappings._KEPT.hits)
    return bad == 0


def test_forks_while_a_thread_receives_and_drops_batches() -> None:
    assert in_a_child(_forks_while_a_thread_receives_and_drops_batches, 120) == 0


def _a_received_batch_saved_and_queued_to_a_child() -> bool:
    """A received batch saved, and queued to a child, reads right after its buffer refills.

    torch.save of a received batch, and the batch put on a torch.multiprocessing queue,
    read by a child after the parent dropped it and the buffer was filled again.
    """
    import io

    import torch.multiprocessing as tmp

    kept_mappings._KEPT = kept_mappings.KeptMappings(1 << 30)
    pool = BufferPool(1 << 30, shared=True)
    pickle.loads(sent(pool)[0])  # kept, unused
    data, slot = sent(pool)
    batch = pickle.loads(data)
    f = io.BytesIO()
    torch.save(batch[1:], f)
    ctx = tmp.get_context("fork")
    q, r = ctx.Queue(), ctx.Queue()

    def child() -> None:
        got = q.get()
        r.put(bool(torch.equal(got, PATTERN[::2])))

    p = ctx.Process(target=child)
    p.start()
    q.put(batch[::2])
    del batch
    import time

    time.sleep(0.5)
    gc.collect()
    from cdml_edge.data import buffer_release

    buffer_release.sweep()
    if slot.free():  # the worker fills it again
        t = slot.tensor(SHAPE, torch.uint8)
        t.fill_(9)
        del t
    ok = r.get(timeout=30)
    p.join()
    f.seek(0)
    saved = torch.load(f)
    return ok and torch.equal(saved, PATTERN[1:])


def test_a_received_batch_saved_and_queued_to_a_child() -> None:
    assert in_a_child(_a_received_batch_saved_and_queued_to_a_child, 60) == 0
