"""When a broker's closes teach the publisher a packet limit, and when they do not."""

from __future__ import annotations

from cdml_edge.outputs.mqtt.size_limit import LOSSES_TO_LEARN, SOON_S, PacketLimit, Suspect

BIG = Suspect("p/e/cam/window", b"x" * 5000)


def _lose(limit: PacketLimit, suspect: Suspect | None, times: int, age: float = 0.5) -> bool:
    return any([limit.lost(suspect, age) for _ in range(times)])


def test_three_quick_losses_on_the_same_large_message_learn_its_size() -> None:
    limit = PacketLimit()
    limit.acked(100)
    assert not _lose(limit, BIG, LOSSES_TO_LEARN - 1)
    assert limit.lost(BIG, 0.5)
    assert limit.learned == 5000
    assert limit.too_large(6000, 5000) and limit.too_large(9000, 8000)
    assert not limit.too_large(5000, 4999)
    assert "learned" in limit.describe()


def test_a_message_no_larger_than_one_acknowledged_is_never_blamed() -> None:
    limit = PacketLimit()
    limit.acked(5000)
    assert not _lose(limit, BIG, 10)
    assert limit.learned is None


def test_a_loss_long_after_the_connect_or_with_nothing_in_flight_breaks_the_streak() -> None:
    limit = PacketLimit()
    assert not _lose(limit, BIG, LOSSES_TO_LEARN - 1)
    assert not limit.lost(BIG, SOON_S + 1)  # a connection that lived: not the message
    assert not _lose(limit, BIG, LOSSES_TO_LEARN - 1)
    assert not limit.lost(None, 0.5)
    assert not _lose(limit, BIG, LOSSES_TO_LEARN - 1)
    assert limit.learned is None


def test_a_different_oldest_message_starts_a_new_streak() -> None:
    limit = PacketLimit()
    other = Suspect(BIG.topic, b"y" * 5000)  # same size, other bytes
    assert not limit.lost(BIG, 0.5)
    assert not limit.lost(other, 0.5)
    assert not limit.lost(BIG, 0.5)
    assert limit.learned is None


def test_a_payload_as_large_acknowledged_later_undoes_the_learned_limit() -> None:
    limit = PacketLimit()
    assert _lose(limit, BIG, LOSSES_TO_LEARN)
    limit.acked(4000)
    assert limit.learned == 5000
    limit.acked(5000)
    assert limit.learned is None
    assert not limit.too_large(10**6, 10**6)


def test_the_announced_limit_counts_whole_packets() -> None:
    limit = PacketLimit()
    limit.announced = 2048
    assert limit.too_large(2049, 2000) and not limit.too_large(2048, 2000)
    assert "2048 bytes" in limit.describe()
