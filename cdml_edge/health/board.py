"""The activity board: a bounded summary of what an appliance publishes.

It reads the messages the agent publishes (``result``, ``window``, ``error``, ``health``,
``status``, ``camera``; a window message's embedded ``results`` count as result messages),
from inside the agent (the status page) or from its broker or
``output.jsonl`` (``cdml-edge tail``), and keeps per source the rate, latency, counters,
the last results, the last anomaly scores, and the recent error events and last health.

Images for thumbnails: the agent hands over the last ``MAX_RESULTS`` image items of each
window (:meth:`ActivityBoard.keep_images`, a reference to the bytes already in memory, no
copy, no decode); a thumbnail is made only when the page asks for it, then cached and the
image let go. So the live path pays nothing for thumbnails nobody looks at.

Bounds: ``MAX_RESULTS`` results and ``MAX_SCORES`` scores per source, the rate's history
(one count per second of the last ``RATE_WINDOW_S``, on the steady clock, so a step of the
wall clock neither freezes nor empties it) per source, ``MAX_ERRORS`` error
events, ``MAX_SOURCES`` sources (a message of one more source is counted in ``ignored``, as is
a message that is not a JSON object); every value kept is checked and every text bounded
(:mod:`~cdml_edge.health.fields`), so a payload of the wrong shape never stops a view;
per source ``MAX_THUMBS`` images or thumbnails, the images at most ``MAX_IMAGE_BYTES`` in
all and each thumbnail at most ``MAX_THUMB_BYTES`` (older ones go first).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdml_edge.health import fields
from cdml_edge.health.thumbs import thumbnail

if TYPE_CHECKING:
    from cdml_edge.window.items import Window

MAX_RESULTS = 8
MAX_SCORES = 60
MAX_ERRORS = 20
MAX_SOURCES = 64
MAX_THUMBS = 2 * MAX_RESULTS
MAX_THUMB_BYTES = 16 * 1024
MAX_IMAGE_BYTES = 8 * 1024 * 1024
RATE_WINDOW_S = 30.0

RESULT_FIELDS = (
    "item",
    "label",
    "score",
    "anomaly",
    "anomaly_score",
    "latency_ms",
    "ts",
    "model",
    "modality",
)


@dataclass
class SourceActivity:
    """One source's share of the board."""

    name: str
    results: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RESULTS))
    scores: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SCORES))
    arrivals: deque[tuple[float, int]] = field(default_factory=deque)
    """(second of the steady clock, results in it), the last ``RATE_WINDOW_S`` of them."""
    thumbs: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    images: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    items: int = 0
    anomalies: int = 0
    windows: int = 0
    errors: int = 0
    window_ms: float | None = None
    camera: str | None = None

    def arrived(self, now: float, count: int = 1) -> None:
        """``count`` results at ``now`` (the steady clock), counted per whole second.

        What is older than ``RATE_WINDOW_S`` goes at once: at most ``RATE_WINDOW_S + 1``
        entries, however long nobody asks for the rate.
        """
        second = float(math.floor(now))
        if self.arrivals and self.arrivals[-1][0] == second:
            self.arrivals[-1] = (second, self.arrivals[-1][1] + count)
        else:
            self.arrivals.append((second, count))
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self.arrivals and self.arrivals[0][0] <= now - RATE_WINDOW_S:
            self.arrivals.popleft()

    def rate(self, now: float) -> float:
        """Results per second over the last ``RATE_WINDOW_S`` (``now``: the steady clock)."""
        self._forget(now)
        n = sum(k for _, k in self.arrivals)
        return n / RATE_WINDOW_S if n else 0.0

    def latency_ms(self) -> float | None:
        """Median latency of the results shown (arrival to result)."""
        values = sorted(r["latency_ms"] for r in self.results if r.get("latency_ms") is not None)
        return values[len(values) // 2] if values else None


class ActivityBoard:
    """Thread-safe; :meth:`observe` a message, :meth:`snapshot` the board as JSON data."""

    def __init__(
        self,
        device: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.device = device
        self.clock = clock
        """The steady clock of rates and ages: a step of the wall clock moves neither."""
        self.wall = wall
        """The time of day, for the snapshot's ``ts`` only."""
        self.sources: dict[str, SourceActivity] = {}
        self.errors: deque[dict[str, Any]] = deque(maxlen=MAX_ERRORS)
        self.health: dict[str, Any] | None = None
        self.status: dict[str, Any] | None = None
        self.messages = 0
        self.ignored = 0
        self.last_message: float | None = None
        self._lock = threading.Lock()

    def _source(self, name: str) -> SourceActivity | None:
        src = self.sources.get(name)
        if src is None and len(self.sources) < MAX_SOURCES:
            src = self.sources[name] = SourceActivity(name)
        return src

    def observe(self, kind: str, source: str | None, payload: Any) -> None:
        """One message: its topic kind, its source (``None`` for device topics), payload.

        A payload that is not a JSON object (``None`` for one that could not be read) is
        counted in ``ignored``; so is one of a source past ``MAX_SOURCES``.
        """
        now = self.clock()
        with self._lock:
            self.messages += 1
            self.last_message = now
            if not isinstance(payload, dict):
                self.ignored += 1
            elif kind == "health":
                self.health = fields.health(payload)
            elif kind == "status":
                self.status = {**payload, "state": fields.text(payload.get("state"))}
            elif source is None or (src := self._source(fields.text(source) or "?")) is None:
                self.ignored += 1
            else:
                self._on_source(src, kind, payload, now)

    def _on_source(self, src: SourceActivity, kind: str, p: dict[str, Any], now: float) -> None:
        if kind == "result":
            result = _result(p)
            src.items += 1
            src.anomalies += result["anomaly"] is True
            src.results.append(result)
            score = result["anomaly_score"]
            if score is None:  # a classifier: its confidence
                score = result["score"]
            if score is not None:
                src.scores.append(float(score))
            src.arrived(now)
        elif kind == "window":
            src.windows += 1
            timings = p.get("timings")
            src.window_ms = (
                fields.number(timings.get("total_ms")) if isinstance(timings, dict) else None
            )
            for item in _embedded_results(p):  # mqtt.results: window
                self._on_source(src, "result", item, now)
        elif kind == "error":
            src.errors += 1
            event = {k: fields.text(p.get(k)) for k in ("source", "item", "error_type", "message")}
            self.errors.append({**event, "ts": fields.timestamp(p.get("ts"))})
        elif kind == "camera":
            src.camera = fields.text(p.get("state"))

    def keep_images(self, window: Window, count: int = MAX_RESULTS) -> None:
        """Hold the last ``count`` image items of ``window`` for thumbnails (see module)."""
        images = [  # named as the results name them (a name's control characters escaped)
            (fields.text(it.name) or it.name, it.data)
            for it in window.items[-count:]
            if it.modality == "image"
        ]
        if not images:
            return
        with self._lock:
            src = self._source(window.source)
            if src is None:
                return
            for name, data in images:
                src.thumbs.pop(name, None)
                src.images[name] = data
                src.images.move_to_end(name)
            _trim(src)

    def add_thumbnail(self, source: str, item: str, jpeg: bytes) -> None:
        """Keep a ready thumbnail of ``item`` (at most ``MAX_THUMB_BYTES``)."""
        if len(jpeg) > MAX_THUMB_BYTES:
            return
        with self._lock:
            src = self._source(source)
            if src is None:
                return
            src.images.pop(item, None)
            src.thumbs[item] = jpeg
            src.thumbs.move_to_end(item)
            _trim(src)

    def thumbnail(self, source: str, item: str) -> bytes | None:
        """The thumbnail of ``item``: cached, or made now from its held image."""
        with self._lock:
            src = self.sources.get(source)
            if src is None:
                return None
            if item in src.thumbs:
                return src.thumbs[item]
            data = src.images.get(item)
        if data is None:
            return None
        thumb = thumbnail(data)  # outside the lock: the pipeline never waits for a page
        with self._lock:
            if src.images.get(item) is data:
                del src.images[item]
                if thumb is not None and len(thumb) <= MAX_THUMB_BYTES:
                    src.thumbs[item] = thumb
                    _trim(src)
        return thumb

    def snapshot(self) -> dict[str, Any]:
        """The board as JSON data (what ``tail --json`` prints and the page renders)."""
        now = self.clock()
        with self._lock:
            sources = {
                name: {
                    "rate_per_s": round(s.rate(now), 3),
                    "items": s.items,
                    "anomalies": s.anomalies,
                    "windows": s.windows,
                    "errors": s.errors,
                    "latency_ms": s.latency_ms(),
                    "window_ms": s.window_ms,
                    "camera": s.camera,
                    "last": list(s.results),
                    "scores": list(s.scores),
                }
                for name, s in sorted(self.sources.items())
            }
            return {
                "device": self.device,
                "ts": self.wall(),
                "messages": self.messages,
                "ignored": self.ignored,
                "last_message_age_s": None
                if self.last_message is None
                else round(now - self.last_message, 3),
                "status": self.status,
                "health": self.health,
                "sources": sources,
                "errors": list(self.errors),
            }


def _result(p: dict[str, Any]) -> dict[str, Any]:
    """The ``RESULT_FIELDS`` of a result payload, each checked (a wrong one is ``None``)."""
    return {
        "item": fields.text(p.get("item")),
        "label": fields.text(p.get("label")),
        "score": fields.number(p.get("score")),
        "anomaly": fields.flag(p.get("anomaly")),
        "anomaly_score": fields.number(p.get("anomaly_score")),
        "latency_ms": fields.number(p.get("latency_ms")),
        "ts": fields.timestamp(p.get("ts")),
        "model": fields.text(p.get("model")),
        "modality": fields.text(p.get("modality")),
    }


def _trim(src: SourceActivity) -> None:
    """Keep ``MAX_THUMBS`` images and thumbnails, the images within ``MAX_IMAGE_BYTES``."""
    while src.images and (
        len(src.images) + len(src.thumbs) > MAX_THUMBS
        or sum(len(v) for v in src.images.values()) > MAX_IMAGE_BYTES
    ):
        src.images.popitem(last=False)
    while len(src.thumbs) + len(src.images) > MAX_THUMBS:
        src.thumbs.popitem(last=False)


def _embedded_results(window: dict[str, Any]) -> list[dict[str, Any]]:
    """The item results a window message carries (``mqtt.results: window``), else none."""
    results = window.get("results")
    if not isinstance(results, list):
        return []
    return [r for r in results if isinstance(r, dict)]
