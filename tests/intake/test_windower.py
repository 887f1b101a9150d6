"""Windower (seconds / max_items / max_bytes / instant) and the global byte budget."""

from __future__ import annotations

import threading
from pathlib import Path

from helpers.agent_runs import wait_for

from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.windower import PipelineGate, Windower, WindowPolicy
from cdml_edge.window.items import Item, Window


def _item(n: int, size: int = 10) -> Item:
    return Item("s", f"{n}.bin", "text", 0.0, b"x" * size, f"id{n}")


def _collect() -> tuple[list[Window], threading.Lock, object]:
    out: list[Window] = []
    lock = threading.Lock()

    def on_close(w: Window) -> None:
        with lock:
            out.append(w)

    return out, lock, on_close


def test_closes_on_max_items_and_keeps_order() -> None:
    out, _, on_close = _collect()
    w = Windower("s", WindowPolicy(seconds=60, max_items=3, max_bytes=10**9), on_close)
    w.start()
    for n in range(7):
        w.add(_item(n))
    assert [len(x.items) for x in out] == [3, 3]
    assert [x.reason for x in out] == ["max_items", "max_items"]
    assert [it.name for it in out[0].items] == ["0.bin", "1.bin", "2.bin"]
    assert w.pending_items() == 1
    w.stop()
    assert out[-1].reason == "stop" and [it.name for it in out[-1].items] == ["6.bin"]
    assert len({x.window_id for x in out}) == 3


def test_closes_on_max_bytes() -> None:
    out, _, on_close = _collect()
    w = Windower("s", WindowPolicy(seconds=60, max_items=100, max_bytes=25), on_close)
    w.start()
    for n in range(3):
        w.add(_item(n, size=10))
    assert len(out) == 1 and out[0].reason == "max_bytes" and out[0].nbytes == 30
    w.stop()


def test_closes_on_seconds() -> None:
    out, lock, on_close = _collect()
    w = Windower("s", WindowPolicy(seconds=0.05, max_items=100, max_bytes=10**9), on_close)
    w.start()
    w.add(_item(0))
    w.add(_item(1))
    wait_for(lambda: len(out) == 1, what="time-closed window")
    assert out[0].reason == "seconds" and len(out[0].items) == 2
    assert out[0].closed_ts >= out[0].opened_ts
    w.add(_item(2))  # a new window opens with a fresh deadline
    wait_for(lambda: len(out) == 2, what="second time-closed window")
    assert [it.name for it in out[1].items] == ["2.bin"]
    w.stop()


def test_instant_mode_closes_every_item() -> None:
    out, _, on_close = _collect()
    policy = WindowPolicy(seconds=60, max_items=1, max_bytes=10**9)
    assert policy.instant
    w = Windower("s", policy, on_close)
    w.start()
    for n in range(4):
        w.add(_item(n))
    assert [len(x.items) for x in out] == [1, 1, 1, 1]
    w.stop()


def test_byte_budget_refuses_above_cap_and_recovers() -> None:
    b = ByteBudget(100)
    assert b.try_acquire(60)
    assert not b.try_acquire(50)  # would exceed
    assert b.refused == 1
    assert b.try_acquire(40)
    assert b.used == 100 and b.peak == 100
    b.release(60)
    assert b.try_acquire(50)
    b.release(90)
    assert b.used == 0
    # one item larger than the whole cap is admitted when nothing else is in flight
    assert b.try_acquire(500)
    assert not b.try_acquire(1)


def test_item_charge_covers_what_its_window_holds(tmp_path: Path) -> None:
    """The budget charges all a window holds, not only the items' bytes.

    Items + packed archive + read-back members + model input and batch; the window releases
    exactly what its items were charged.
    """
    import numpy as np
    from helpers.agent_runs import jpeg
    from helpers.models import brightness_classifier

    from cdml_edge.agent.app import DATA_COPIES, window_charges
    from cdml_edge.archive import open_archive
    from cdml_edge.model.runner import ModelRunner
    from cdml_edge.window.pack import pack_window

    runner = ModelRunner.load(brightness_classifier(tmp_path / "b.onnx", size=64))
    budget = ByteBudget(1 << 30, data_factor=DATA_COPIES)
    window_charges(budget, {"image": runner})
    datas = [jpeg(v, size=32) for v in range(0, 256, 32)]
    items = [
        Item("cam", f"{n}.jpg", "image", 0.0, d, f"id{n}", charge=budget.cost(len(d), "image"))
        for n, d in enumerate(datas)
    ]
    windower_out: list[Window] = []
    wr = Windower("cam", WindowPolicy(60.0, len(items), 1 << 30), windower_out.append)
    for it in items:
        wr.add(it)
    w = windower_out[0]
    packed = pack_window(w, device="d", modality="image")
    arc = open_archive(packed.archive)
    read_back = sum(len(arc.read(m.member)) for m in packed.manifest.items)
    model_input = np.zeros((len(items), *runner.spec.input.shape()), np.float32).nbytes
    held = sum(len(d) for d in datas) + len(packed.archive) + read_back + 2 * model_input
    assert w.charged == sum(it.charge for it in items)
    assert w.charged >= held, (w.charged, held)
    for it in items:
        assert budget.try_acquire(it.charge)
    budget.release(w.charged)
    assert budget.used == 0


# -- dynamic batching: close when the pipeline is idle ------------------------------------------


def test_idle_pipeline_closes_on_arrival_and_a_busy_one_batches() -> None:
    """One worker: what arrives while a window is scored closes as one window.

    The first item closes its window at once (nothing to wait for); while that window is being
    scored, arrivals gather; the worker finishing closes them as one window.
    """
    out, _, on_close = _collect()
    gate = PipelineGate(workers=1)
    w = Windower("s", WindowPolicy(seconds=60, max_items=100, max_bytes=10**9), on_close, gate)
    w.start()
    w.add(_item(0))
    assert [(x.reason, len(x.items)) for x in out] == [("idle", 1)]
    assert gate.busy == 1
    for n in range(1, 5):
        w.add(_item(n))
    assert len(out) == 1 and w.pending_items() == 4  # busy: the items wait
    gate.leave()  # the first window is scored
    assert [(x.reason, len(x.items)) for x in out] == [("idle", 1), ("idle", 4)]
    assert gate.busy == 1
    gate.leave()
    w.add(_item(5))
    assert out[-1].reason == "idle" and [it.name for it in out[-1].items] == ["5.bin"]
    w.stop()


def test_limits_stay_upper_bounds_while_the_pipeline_is_busy() -> None:
    out, lock, on_close = _collect()
    gate = PipelineGate(workers=1)
    gate.enter()  # a window in the pipeline that is not finished
    w = Windower("s", WindowPolicy(seconds=0.05, max_items=3, max_bytes=10**9), on_close, gate)
    w.start()
    for n in range(4):
        w.add(_item(n))
    assert [(x.reason, len(x.items)) for x in out] == [("max_items", 3)]
    wait_for(lambda: len(out) == 2, what="time-closed window")
    assert (out[1].reason, len(out[1].items)) == ("seconds", 1)
    assert gate.busy == 3  # windows closed on their limits are counted in as well
    w.stop()


def test_a_free_worker_takes_one_waiting_window_sources_in_turn() -> None:
    out, _, on_close = _collect()
    gate = PipelineGate(workers=1)
    gate.enter()
    policy = WindowPolicy(seconds=60, max_items=100, max_bytes=10**9)
    a, b = Windower("a", policy, on_close, gate), Windower("b", policy, on_close, gate)
    a.add(Item("a", "1", "text", 0.0, b"x", "a1"))
    b.add(Item("b", "1", "text", 0.0, b"x", "b1"))
    assert out == []
    gate.leave()  # one worker free: one window goes
    assert [x.source for x in out] == ["a"]
    gate.leave()  # the next one starts the round at the other source
    assert [x.source for x in out] == ["a", "b"]
    a.stop()
    b.stop()


def test_without_close_when_idle_the_window_waits_for_its_limits() -> None:
    out, _, on_close = _collect()
    gate = PipelineGate(workers=2)
    policy = WindowPolicy(seconds=60, max_items=3, max_bytes=10**9, close_when_idle=False)
    w = Windower("s", policy, on_close, gate)
    for n in range(3):
        w.add(_item(n))
    assert [(x.reason, len(x.items)) for x in out] == [("max_items", 3)]
    w.stop()
