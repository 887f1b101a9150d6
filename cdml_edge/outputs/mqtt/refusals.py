"""Messages the broker refused: when the spool is drained again, and what health says.

An MQTT 5 broker can answer a QoS 1 PUBLISH with a failure reason code (``Not authorized``
by its ACL, ``Quota exceeded``, ``Topic Name invalid``, ...). The publisher keeps such a
message in the spool instead of counting it delivered; :class:`Refusals` pauses the spool's
drain after a refusal (a backoff: the first retry after ``first`` seconds, doubling up to
``cap``), so a refused message is not sent again at once and for ever, and names the
refused topics for ``/healthz`` until a message on each gets through (or ``quiet_s`` passes
without a refusal once the retry is due: the refused messages may have left the spool).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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

    def may_drain(self) -> bool:
        """Whether the spool may be drained now (no pause after a refusal under way)."""
        return self._clock() >= self._resume_at

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
