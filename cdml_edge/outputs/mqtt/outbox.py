"""The bounded in-memory outbox between the pipeline and the MQTT client.

The outbox holds messages waiting for an in-flight slot while the broker is connected. It is
bounded by bytes (``outbox.max_bytes``); what does not fit goes to the disk spool, so the
pipeline never waits on a slow broker unless the spool itself is full with ``policy: block``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cdml_edge.window.topics import OutMessage

log = logging.getLogger(__name__)


class PublishBatch:
    """Counts the messages of one ``publish_batch`` call; fires a callback at zero.

    ``callback`` (``on_durable``) when every message was acknowledged or spooled;
    ``given_up`` instead when the publisher gave up on one of them.
    """

    __slots__ = ("_lock", "_remaining", "_callback", "_given_up", "_failed")

    def __init__(
        self,
        size: int,
        callback: Callable[[], None] | None,
        given_up: Callable[[], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._remaining = size
        self._callback = callback
        self._given_up = given_up
        self._failed = False
        if size == 0:
            self._fire()

    def done(self, n: int = 1, failed: bool = False) -> None:
        """``n`` more messages are acknowledged or spooled (``failed``: given up on)."""
        with self._lock:
            if self._remaining <= 0:
                return
            self._remaining -= n
            self._failed = self._failed or failed
            fire = self._remaining <= 0
        if fire:
            self._fire()

    def refuse(self) -> None:
        """The batch was refused (its caller takes it again): no callback fires, ever."""
        with self._lock:
            self._callback = None
            self._given_up = None

    @property
    def remaining(self) -> int:
        """Messages of the batch not yet acknowledged or spooled."""
        with self._lock:
            return self._remaining

    def _fire(self) -> None:
        callback, self._callback = self._callback, None
        given_up, self._given_up = self._given_up, None
        if self._failed:
            callback = given_up
        if callback is not None:
            try:
                callback()
            except Exception:  # noqa: BLE001 - a bad callback must not stop publishing
                log.exception("on_durable callback failed")


@dataclass
class Entry:
    """One message on its way: ``done`` is set once it counted toward its batch."""

    message: OutMessage
    batch: PublishBatch
    done: bool = field(default=False)
    on_sent: Callable[[OutMessage], None] | None = None
    """Called with the message once it is acknowledged or spooled (not when given up)."""

    @property
    def size(self) -> int:
        """Bytes charged against the outbox bound: payload, topic and 32 for overhead."""
        return len(self.message.payload) + len(self.message.topic) + 32

    def complete(self) -> None:
        """Count this message toward its batch (once; later calls do nothing)."""
        if not self.done:
            self.done = True
            if self.on_sent is not None:
                try:
                    self.on_sent(self.message)
                except Exception:  # noqa: BLE001 - a bad callback must not stop publishing
                    log.exception("on_sent callback failed")
            self.batch.done()

    def abandon(self) -> None:
        """Give up on this message: its batch fires ``given_up``, not ``on_durable``."""
        if not self.done:
            self.done = True
            self.batch.done(failed=True)

    def refuse(self) -> None:
        """Refuse this message and its batch: the caller retries it, no callback fires."""
        self.batch.refuse()
        self.done = True


class Outbox:
    """A FIFO of :class:`Entry` bounded by ``max_bytes`` (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._queue: deque[Entry] = deque()
        self._bytes = 0

    def try_put(self, entry: Entry) -> bool:
        """Append unless it would exceed the byte bound."""
        with self._lock:
            if self._bytes + entry.size > self.max_bytes:
                return False
            self._queue.append(entry)
            self._bytes += entry.size
            return True

    def put_front(self, entries: Iterable[Entry]) -> None:
        """Give entries back at the head, in order (ignores the bound: they were inside it)."""
        items = list(entries)
        with self._lock:
            for entry in reversed(items):
                self._queue.appendleft(entry)
                self._bytes += entry.size

    def pop(self) -> Entry | None:
        """The oldest entry, removed; ``None`` when empty."""
        with self._lock:
            if not self._queue:
                return None
            entry = self._queue.popleft()
            self._bytes -= entry.size
            return entry

    def take_all(self) -> list[Entry]:
        """Every entry, oldest first; the outbox is empty after."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._bytes = 0
            return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def bytes(self) -> int:
        """Bytes held now (the entries' :attr:`Entry.size`)."""
        with self._lock:
            return self._bytes
