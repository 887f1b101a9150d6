"""The largest PUBLISH a broker takes: announced (MQTT 5 CONNACK) or learned from its closes.

Under MQTT 3.1.1 a broker cannot announce a Maximum Packet Size; Mosquitto with
``max_packet_size`` then closes the connection of a client that sends a larger PUBLISH.
The publisher takes back what was in flight and sends it again first after reconnecting,
so one such message would cost a connection for ever. :class:`PacketLimit` learns the
limit instead: when connections are lost :data:`LOSSES_TO_LEARN` times in a row, each
soon after the broker accepted it, with the same message the oldest in flight, and that
message's payload larger than any the broker acknowledged, payloads of its size or more
are taken as too large from then on (for this run). Sizes learned are payload bytes: the
cheapest measure on the acknowledgement path, and the topic's few bytes do not matter.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

LOSSES_TO_LEARN = 3
SOON_S = 10.0  # a loss later than this after the CONNACK does not count toward learning


@dataclass
class Suspect:
    """The oldest message in flight when a connection was lost: its identity and size."""

    topic: str
    payload: bytes

    def key(self) -> tuple[str, int, int]:
        """Same topic, length and CRC: the same message, spooled or live."""
        return self.topic, len(self.payload), zlib.crc32(self.payload)


class PacketLimit:
    """What the broker takes, from its CONNACK and from what it acknowledged and closed on."""

    def __init__(self) -> None:
        self.announced: int | None = None
        self.learned: int | None = None  # payloads of this size or more are too large
        self.largest_acked = 0
        self._streak_key: tuple[str, int, int] | None = None
        self._streak = 0

    def too_large(self, packet_size: int, payload_len: int) -> bool:
        """The broker would not take this PUBLISH (``packet_size`` bytes in all)."""
        if self.announced is not None and packet_size > self.announced:
            return True
        return self.learned is not None and payload_len >= self.learned

    def describe(self) -> str:
        """The limit in words, for a log line."""
        if self.learned is None:
            return f"the broker's maximum packet size ({self.announced} bytes)"
        return f"the limit learned from the broker's closes (payloads under {self.learned} bytes)"

    def acked(self, payload_len: int) -> None:
        """The broker acknowledged a PUBLISH with a ``payload_len``-byte payload."""
        if payload_len > self.largest_acked:
            self.largest_acked = payload_len
            if self.learned is not None and payload_len >= self.learned:
                self.learned = None  # it took one as large after all

    def lost(self, oldest: Suspect | None, connection_age: float) -> bool:
        """A connection was lost with ``oldest`` the oldest message in flight.

        ``True`` when this loss made the limit learned (``self.learned`` now set).
        """
        if oldest is None or connection_age > SOON_S or len(oldest.payload) <= self.largest_acked:
            self._streak_key, self._streak = None, 0
            return False
        key = oldest.key()
        self._streak = self._streak + 1 if key == self._streak_key else 1
        self._streak_key = key
        if self._streak < LOSSES_TO_LEARN:
            return False
        self._streak_key, self._streak = None, 0
        self.learned = len(oldest.payload)
        return True
