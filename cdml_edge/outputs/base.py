"""The contract between the pipeline and whatever carries results away.

An :class:`Output` takes a batch of messages for one window and calls ``on_durable``
once every message in it is safe: acknowledged by the broker (QoS 1 PUBACK), written to
the disk spool, or flushed to a JSON-lines file. Source files are deleted or moved only
after that call (at-least-once delivery). When the output gives up on a message it can
never deliver (larger than the broker or the spool takes), it calls ``on_given_up``
instead, once the rest of the batch is settled: the files stay where they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from cdml_edge.window.topics import OutMessage

__all__ = ["OutMessage", "Output"]


class Output(Protocol):
    """Where results go: MQTT publisher, JSON-lines file, stdout."""

    def start(self) -> None:
        """Connect / open; must not block on an unreachable broker."""
        ...

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Queue messages; call ``on_durable`` once all are acknowledged or spooled.

        ``on_given_up`` instead when the output gave up on one of them (never deliverable).
        """
        ...

    def stats(self) -> dict[str, int]:
        """Counters for the health topic (queued, spooled bytes, dropped, ...)."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Flush what can be flushed within ``timeout`` and disconnect."""
        ...
