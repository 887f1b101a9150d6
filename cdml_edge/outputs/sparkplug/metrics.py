"""The metrics of the Sparkplug edge node and its devices, read from our JSON payloads.

A device per source: the last result (label, score, anomaly, anomaly score, item, id,
latency), the last window (items, errors, items/s, counts) and the last error and camera
state. The node: ``bdSeq``, ``Node Control/Rebirth`` and the health counters. Each metric
has a fixed alias, unique across the node: the node's from 1, device ``n``'s from
``(n + 1) * 256``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdml_edge.outputs.sparkplug.proto import BOOLEAN, DATETIME, DOUBLE, INT64, STRING

BDSEQ = "bdSeq"
REBIRTH = "Node Control/Rebirth"
ALIAS_BLOCK = 256

Reader = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name, Sparkplug data type and where its value is in a JSON payload."""

    name: str
    datatype: int
    read: Reader


def _key(key: str) -> Reader:
    return lambda doc: doc.get(key)


def _ms(key: str) -> Reader:
    return lambda doc: None if doc.get(key) is None else int(float(doc[key]) * 1000)


def _rate(doc: dict[str, Any]) -> float | None:
    if doc.get("items") is None or doc.get("closed_ts") is None:
        return None
    span = float(doc["closed_ts"]) - float(doc.get("opened_ts") or doc["closed_ts"])
    return round(float(doc["items"]) / max(span, 1.0), 3)


def _json(key: str) -> Reader:
    return lambda doc: None if doc.get(key) is None else json.dumps(doc[key], sort_keys=True)


# topic kind -> the device metrics a message of that kind sets
DEVICE_METRICS: dict[str, list[MetricSpec]] = {
    "result": [
        MetricSpec("result/label", STRING, _key("label")),
        MetricSpec("result/score", DOUBLE, _key("score")),
        MetricSpec("result/anomaly", BOOLEAN, _key("anomaly")),
        MetricSpec("result/anomaly_score", DOUBLE, _key("anomaly_score")),
        MetricSpec("result/item", STRING, _key("item")),
        MetricSpec("result/id", STRING, _key("id")),
        MetricSpec("result/ts", DATETIME, _ms("ts")),
        MetricSpec("result/latency_ms", DOUBLE, _key("latency_ms")),
        MetricSpec("result/model", STRING, _key("model")),
    ],
    "window": [
        MetricSpec("window/id", STRING, _key("window_id")),
        MetricSpec("window/items", INT64, _key("items")),
        MetricSpec("window/errors", INT64, _key("errors")),
        MetricSpec("window/items_per_s", DOUBLE, _rate),
        MetricSpec("window/counts", STRING, _json("counts")),
    ],
    "error": [
        MetricSpec("error/type", STRING, _key("error_type")),
        MetricSpec("error/message", STRING, _key("message")),
        MetricSpec("error/item", STRING, _key("item")),
    ],
    "camera": [
        MetricSpec("camera/state", STRING, _key("state")),
        MetricSpec("camera/reason", STRING, _key("reason")),
    ],
}
NODE_METRICS: dict[str, list[MetricSpec]] = {
    "health": [
        MetricSpec("health/items", INT64, _key("items")),
        MetricSpec("health/windows", INT64, _key("windows")),
        MetricSpec("health/errors", INT64, _key("errors")),
        MetricSpec("health/dropped", INT64, _key("dropped")),
        MetricSpec("health/spool_bytes", INT64, _key("spool_bytes")),
        MetricSpec("health/spool_records", INT64, _key("spool_records")),
        MetricSpec("health/outbox_depth", INT64, _key("outbox_depth")),
        MetricSpec("health/broker_connected", BOOLEAN, _key("broker_connected")),
        MetricSpec("health/uptime_s", DOUBLE, _key("uptime_s")),
        MetricSpec("health/degraded", STRING, _json("degraded")),
    ]
}
NODE_CONTROL = [MetricSpec(BDSEQ, INT64, _key(BDSEQ)), MetricSpec(REBIRTH, BOOLEAN, _key(REBIRTH))]


def _aliases(specs: list[MetricSpec], first: int) -> dict[str, tuple[int, MetricSpec]]:
    return {s.name: (first + i, s) for i, s in enumerate(specs)}


NODE_ALIASES = _aliases(NODE_CONTROL + [s for v in NODE_METRICS.values() for s in v], 1)
DEVICE_SPECS = [s for v in DEVICE_METRICS.values() for s in v]


def device_aliases(index: int) -> dict[str, tuple[int, MetricSpec]]:
    """Name -> (alias, spec) of the metrics of the ``index``-th device."""
    return _aliases(DEVICE_SPECS, (index + 1) * ALIAS_BLOCK)


def set_value(metric: Any, datatype: int, value: Any) -> None:
    """Put ``value`` into ``metric``'s value field for ``datatype`` (``None``: ``is_null``)."""
    if value is None:
        metric.is_null = True
    elif datatype in (INT64, DATETIME):
        metric.long_value = int(value) & 0xFFFFFFFFFFFFFFFF  # Int64: two's complement
    elif datatype == DOUBLE:
        metric.double_value = float(value)
    elif datatype == BOOLEAN:
        metric.boolean_value = bool(value)
    else:
        metric.string_value = str(value)
