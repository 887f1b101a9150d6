"""Messages the broker refused: when they are sent again, where they wait, what health says.

An MQTT 5 broker can answer a PUBLISH with a failure reason code (``Not authorized`` by its
ACL, ``Quota exceeded``, ``Topic Name invalid``, ...), in a PUBACK (QoS 1) or a PUBREC
(QoS 2). The publisher keeps such a message instead of counting it delivered: in the spool,
or in memory (:class:`Held`) when the spool cannot take it. :class:`Refusals` knows the
refused topics: a message on one of them waits for the retry (a backoff: the first after
``first`` seconds, doubling up to ``cap``), so it is not sent again at once and for ever,
while messages on other topics go on. It names the refused topics for ``/healthz`` until a
message on each gets through (or ``quiet_s`` passes without a refusal once the retry is
due: the refused messages may have left the spool).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from cdml_edge.backoff import Backoff

log = logging.getLogger(__name__)


class Refusals:
    """The refusals of one publisher (its I/O thread calls everything but :attr:`degraded`)."""

    def __init__(
        self,
        first: float = 5.0,
        cap: float = 300.0,
        quiet_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff = Backoff(first, cap, jitter="equal")
        self.quiet_s = quiet_s
        self._clock = clock
        self._resume_at = 0.0
        self._last_at = 0.0
        self.topics: dict[str, str] = {}
        """Refused topics not accepted since, topic -> the broker's reason."""

    def refused(self, topic: str, reason: str, where: str) -> None:
        """The broker refused the message on ``topic``; ``where``: where it is kept now."""
        now = self._clock()
        self._last_at = now
        new = topic not in self.topics
        self.topics[topic] = reason
        if now >= self._resume_at:  # one pause per retry round
            delay = self._backoff.next()
            self._resume_at = now + delay
            log.warning(
                "the broker refused a message on %s: %s; %s, retried in %.0f s",
                topic,
                reason,
                where,
                delay,
            )
        elif new:
            log.warning("the broker refused a message on %s: %s; %s", topic, reason, where)

    def may_retry(self) -> bool:
        """Whether messages on refused topics may be sent again now (the pause is over)."""
        return self._clock() >= self._resume_at

    def waits(self, topic: str) -> bool:
        """Whether a message on ``topic`` must wait: the topic is refused and the pause on."""
        return topic in self.topics and not self.may_retry()

    def accepted(self, topic: str) -> None:
        """A message on ``topic`` got through: it is no longer refused."""
        if self.topics.pop(topic, None) is not None:
            log.info("the broker accepts messages on %s again", topic)
            if not self.topics:
                self._backoff.reset()

    @property
    def degraded(self) -> str | None:
        """The refused topics and reasons, while a refusal is recent; else ``None``."""
        topics = dict(self.topics)
        recent = self._clock() - self._last_at <= max(self.quiet_s, self._resume_at - self._last_at)
        if not topics or not recent:
            return None
        named = "; ".join(f"{reason} on {topic}" for topic, reason in sorted(topics.items())[:3])
        more = f" (and {len(topics) - 3} more topics)" if len(topics) > 3 else ""
        return f"the broker refuses messages: {named}{more}; they are kept and sent again"


T = TypeVar("T")


class Held(Generic[T]):
    """Refused messages kept in memory until their retry, oldest first, bounded by bytes.

    Full: :meth:`add` refuses, and the caller keeps the message elsewhere (or its files).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: deque[tuple[T, int]] = deque()

    def add(self, item: T, size: int) -> bool:
        """Keep ``item`` (``size`` bytes) unless that would pass the bound."""
        if self.bytes + size > self.max_bytes:
            return False
        self._items.append((item, size))
        self.bytes += size
        return True

    def pop(self) -> T | None:
        """The oldest item, taken out; ``None`` when empty."""
        if not self._items:
            return None
        item, size = self._items.popleft()
        self.bytes -= size
        return item

    def take_all(self) -> list[T]:
        """Every item, oldest first; empty after."""
        items = [item for item, _ in self._items]
        self._items.clear()
        self.bytes = 0
        return items

    def __len__(self) -> int:
        return len(self._items)
