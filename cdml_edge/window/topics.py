"""MQTT topics, the message an output publishes and the per-topic sequence numbers.

A message's topic is relative to ``{prefix}/{device}`` (:func:`relative_topic`, read back by
:func:`split_topic`); the output puts :func:`topic_base` in front, except before an
:func:`absolute_topic` (Home Assistant discovery, Sparkplug B). Subscribers detect gaps with
the per-topic ``seq`` a :class:`Sequencer` hands out.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

TopicKind = Literal["status", "health", "error", "result", "window", "camera"]
PER_SOURCE_KINDS: frozenset[str] = frozenset({"result", "window", "error", "camera"})


@dataclass(frozen=True)
class OutMessage:
    """One message to publish: topic relative to ``{prefix}/{device}``, JSON payload bytes."""

    topic: str
    payload: bytes
    retain: bool = False
    qos: int | None = None  # None: the configured default


def relative_topic(kind: TopicKind, source: str | None = None) -> str:
    """Topic below ``{prefix}/{device}``: ``status``, ``health``, ``cam1/result``, ..."""
    if kind in PER_SOURCE_KINDS:
        if not source:
            raise ValueError(f"topic kind {kind!r} needs a source")
        _check_level(source, "source")
        return f"{source}/{kind}"
    if source is not None:
        raise ValueError(f"topic kind {kind!r} takes no source (got {source!r})")
    return kind


def topic_for(prefix: str, device: str, kind: TopicKind, source: str | None = None) -> str:
    """Full topic: ``{prefix}/{device}/{kind}`` or ``{prefix}/{device}/{source}/{kind}``."""
    _check_level(device, "device")
    rel = relative_topic(kind, source)
    prefix = prefix.strip("/")
    return f"{prefix}/{device}/{rel}" if prefix else f"{device}/{rel}"


ABSOLUTE = "/"
"""The first character of a message topic that is published as it is (after it)."""


def absolute_topic(full: str) -> str:
    """The message topic of ``full``, a topic outside ``{prefix}/{device}``."""
    return ABSOLUTE + full


def topic_base(topic_prefix: str, device: str) -> str:
    """``{prefix}/{device}/``, the start of every full topic."""
    return f"{topic_prefix.strip('/')}/{device}/" if topic_prefix else f"{device}/"


def split_topic(relative: str) -> tuple[str, str | None]:
    """The kind and source of a topic relative to ``{prefix}/{device}``.

    ``cam/result`` -> ``("result", "cam")``; ``health`` -> ``("health", None)``.
    """
    source, _, kind = relative.rpartition("/")
    return kind, source or None


def _check_level(value: str, what: str) -> None:
    if not value or any(c in value for c in "/+#\x00"):
        raise ValueError(f"{what} {value!r} is not a valid single MQTT topic level")


class Sequencer:
    """Per-topic monotonically increasing sequence numbers (thread-safe, starts at 1)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}

    def next(self, topic: str) -> int:
        """The next number for ``topic`` (1 for its first message)."""
        with self._lock:
            n = self._last.get(topic, 0) + 1
            self._last[topic] = n
            return n

    def peek(self, topic: str) -> int:
        """Last number handed out for ``topic`` (0 if none)."""
        with self._lock:
            return self._last.get(topic, 0)
