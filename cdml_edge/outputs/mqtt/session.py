"""What a protocol on top of MQTT (Sparkplug B) asks of the publisher's connection.

The publisher calls a :class:`Session`, when it has one, from its I/O thread: for the Last
Will before each CONNECT, for the messages that open each connection (and again when the
session asks), for the message of a clean stop, to number each message of its namespace as
it goes on the wire, and with the commands it receives.
"""

from __future__ import annotations

from typing import Protocol


class Session(Protocol):
    """The hooks; see the module docstring."""

    namespace: str
    """Message topics starting with this are numbered by :meth:`stamp`."""

    clean_session: bool
    """Every CONNECT asks the broker to keep no session (Sparkplug B 3.0 requires it)."""

    @property
    def command_topic(self) -> str:
        """Subscribed to after every CONNACK; what arrives goes to :meth:`on_command`."""
        ...

    def connecting(self) -> tuple[str, bytes]:
        """Before a CONNECT: the Last Will (topic, payload; QoS 1, not retained)."""
        ...

    def births(self) -> list[tuple[str, bytes]]:
        """After a CONNACK or when :meth:`rebirth_due`: published first (QoS 0)."""
        ...

    def death(self) -> tuple[str, bytes]:
        """Published on a clean stop before DISCONNECT (QoS 1, not retained)."""
        ...

    def stamp(self, payload: bytes, historical: bool) -> bytes:
        """``payload`` numbered as the next message on the wire.

        ``historical``: it comes from the spool (kept while the broker was away or busy).
        """
        ...

    def unstamp(self) -> None:
        """The message last stamped did not go out."""
        ...

    def rebirth_due(self) -> bool:
        """The births are to be published again."""
        ...

    def on_command(self, topic: str, raw: bytes) -> None:
        """A message on :attr:`command_topic`."""
        ...
