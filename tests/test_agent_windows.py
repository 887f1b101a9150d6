"""Windower (seconds / max_items / max_bytes / instant) and the global byte budget."""

from __future__ import annotations

import threading

from agent_fixtures import wait_for

from cdml_edge.agent.windows import ByteBudget, Item, Window, Windower, WindowPolicy


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
