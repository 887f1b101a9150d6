"""The contract between the pipeline and whatever carries results away.

An :class:`Output` takes a batch of messages for one window and calls ``on_durable``
once every message in it is safe: acknowledged by the broker (QoS 1 PUBACK), written to
the disk spool, or flushed to a JSON-lines file. Source files are deleted or moved only
after that call (at-least-once delivery).
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
        self, messages: Sequence[OutMessage], on_durable: Callable[[], None] | None = None
    ) -> None:
        """Queue messages; call ``on_durable`` once all are acknowledged or spooled."""
        ...

    def stats(self) -> dict[str, int]:
        """Counters for the health topic (queued, spooled bytes, dropped, ...)."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Flush what can be flushed within ``timeout`` and disconnect."""
        ...
