"""Home Assistant MQTT discovery: each source announced as entities, retained.

With ``mqtt.discovery: homeassistant`` the agent publishes, at every start and reload, one
retained config per entity on ``{discovery_prefix}/{component}/{device}/{object}/config``:
per source its last label, score, anomaly, anomaly score and rate (items/s of the last
window), and per device one ``online`` entity. They read our JSON topics; their availability
is the retained ``status`` topic whose ``offline`` is the Last Will. The topics announced are
kept in ``<state_dir>/discovery.json``: a source gone from the configuration (or discovery
turned off) has its configs removed with an empty retained payload.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cdml_edge import __version__
from cdml_edge.backoff import Backoff
from cdml_edge.config import AppConfig
from cdml_edge.fsio import atomic_write
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.mqtt.publisher import OutputUnavailable, PublisherClosed
from cdml_edge.window.topics import OutMessage, absolute_topic, topic_for

log = logging.getLogger(__name__)

LEDGER = "discovery.json"
"""The announced discovery topics, in the state folder."""

# object suffix -> (component, name, topic kind, value template, extra keys)
SOURCE_ENTITIES: dict[str, tuple[str, str, str, str, dict[str, Any]]] = {
    "label": ("sensor", "last label", "result", "{{ value_json.label }}", {"icon": "mdi:tag"}),
    "score": (
        "sensor",
        "score",
        "result",
        "{{ value_json.score }}",
        {"state_class": "measurement"},
    ),
    "anomaly": (
        "binary_sensor",
        "anomaly",
        "result",
        "{{ 'ON' if value_json.anomaly else 'OFF' }}",
        {"device_class": "problem", "payload_on": "ON", "payload_off": "OFF"},
    ),
    "anomaly_score": (
        "sensor",
        "anomaly score",
        "result",
        "{{ value_json.anomaly_score }}",
        {"state_class": "measurement"},
    ),
    "rate": (
        "sensor",
        "rate",
        "window",
        "{{ (value_json['items'] / ([value_json.closed_ts - value_json.opened_ts, 1.0] | max))"
        " | round(2) }}",
        {"state_class": "measurement", "unit_of_measurement": "items/s"},
    ),
}


def ledger_path(cfg: AppConfig) -> Path:
    """Where the announced topics are kept."""
    assert cfg.state_dir is not None
    return cfg.state_dir / LEDGER


def discovery_configs(cfg: AppConfig) -> dict[str, dict[str, Any]]:
    """Discovery topic -> config of every entity ``cfg`` announces (none without discovery)."""
    mqtt = cfg.mqtt
    if mqtt is None or mqtt.discovery != "homeassistant":
        return {}
    device_id = cfg.device.id
    status = topic_for(mqtt.topic_prefix, device_id, "status")
    device = {
        "identifiers": [f"cdml_edge_{device_id}"],
        "name": device_id,
        "manufacturer": "cdml-edge",
        "model": "cdml-edge agent",
        "sw_version": __version__,
    }
    origin = {"name": "cdml-edge", "sw_version": __version__}
    base = {"device": device, "origin": origin, "qos": 1}
    out: dict[str, dict[str, Any]] = {}
    online = {
        **base,
        "name": "online",
        "unique_id": f"cdml_{device_id}_online",
        "state_topic": status,
        "value_template": "{{ value_json.state }}",
        "payload_on": "online",
        "payload_off": "offline",
        "device_class": "connectivity",
    }
    out[_topic(mqtt.discovery_prefix, "binary_sensor", device_id, "online")] = online
    availability = {
        "availability_topic": status,
        "availability_template": "{{ value_json.state }}",
        "payload_available": "online",
        "payload_not_available": "offline",
    }
    objects = _object_ids([s.name for s in cfg.sources])
    for source in cfg.sources:
        for suffix, (component, name, kind, template, extra) in SOURCE_ENTITIES.items():
            obj, unique = objects[source.name, suffix]
            out[_topic(mqtt.discovery_prefix, component, device_id, obj)] = {
                **base,
                **availability,
                "name": f"{source.name} {name}",
                "unique_id": f"cdml_{device_id}_{unique}",
                "state_topic": topic_for(mqtt.topic_prefix, device_id, kind, source.name),  # type: ignore[arg-type]
                "value_template": template,
                **extra,
            }
    return out


def _topic(prefix: str, component: str, node: str, obj: str) -> str:
    """The discovery topic of entity ``obj`` (an object id already) of device ``node``."""
    return f"{prefix}/{component}/{ha_id(node)}/{obj}/config"


def ha_id(name: str) -> str:
    """``name`` as a Home Assistant node or object id: ``[a-zA-Z0-9_-]`` only, distinct.

    Home Assistant ignores a config on a topic with other characters, so a '.' becomes '_';
    as ``line.1`` and ``line_1`` would then share an id, a name that had a '.' gets ``_`` and
    6 hex digits of its SHA-256 after it (``line_1_3c5f0e``). A name without one is its own
    id. Either way the id depends on the name alone: it stays what it is whatever else is
    configured.
    """
    if "." not in name:
        return name
    return f"{name.replace('.', '_')}_{_digest(name)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _object_ids(sources: Iterable[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(source, entity suffix) -> the entity's object id and its ``unique_id`` tail.

    The object id is ``<ha_id(source)>_<suffix>``, the tail ``<source>_<suffix>``. Two
    valid names can still give one of them (``a``'s ``anomaly_score`` and ``a_anomaly``'s
    ``score``): the entity of the shortest name keeps it, each other one gets
    ``_<6 hex digits of its name and suffix>`` after both.
    """
    clashes: dict[str, list[tuple[str, str]]] = {}
    for source in sources:
        for suffix in SOURCE_ENTITIES:
            clashes.setdefault(f"{source}_{suffix}", []).append((source, suffix))
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for entities in clashes.values():
        keep = min(entities, key=lambda e: (len(e[0]), e[0]))
        for source, suffix in entities:
            tail = ""
            if (source, suffix) != keep:
                tail = "_" + _digest(f"{source}\0{suffix}")
            out[source, suffix] = (f"{ha_id(source)}_{suffix}{tail}", f"{source}_{suffix}{tail}")
    return out


def read_ledger(path: Path) -> set[str]:
    """The topics announced before (none when the file is missing or unreadable)."""
    try:
        doc = json.loads(path.read_text())
        return {str(t) for t in doc["topics"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def write_ledger(path: Path, topics: Iterable[str]) -> None:
    """Keep ``topics`` as the announced ones (atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"topics": sorted(topics)}, indent=1).encode())


def discovery_messages(configs: dict[str, dict[str, Any]], announced: set[str]) -> list[OutMessage]:
    """Retained configs to publish, then empty retained payloads for what is gone.

    QoS 1 whatever ``mqtt.qos`` says of results: a removal lost at QoS 0 would already be
    struck from the ledger, and its entity would stay.
    """
    msgs = [
        OutMessage(absolute_topic(t), json.dumps(doc, sort_keys=True).encode(), retain=True, qos=1)
        for t, doc in configs.items()
    ]
    gone = sorted(announced - configs.keys())
    msgs += [OutMessage(absolute_topic(t), b"", retain=True, qos=1) for t in gone]
    return msgs


RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0


class HeldConfigs:
    """Discovery configs a publisher refused (a full spool disk, a full outbox), held.

    A thread offers them again, 1 s, 2 s ... at most every 30 s apart, until the publisher
    takes them or is stopped. The publisher's stats count them: ``discovery_held`` (the
    messages held now) and ``discovery_retries``. The refusal is logged once, the end once.
    """

    def __init__(
        self,
        out: Output,
        msgs: list[OutMessage],
        on_durable: Callable[[], None],
        retry: tuple[float, float] = (RETRY_MIN_S, RETRY_MAX_S),
    ) -> None:
        self.out, self.msgs, self.on_durable = out, msgs, on_durable
        self._backoff = Backoff(*retry, jitter="equal")
        self._cancel = threading.Event()
        self._count("discovery_held", len(msgs))
        self._count("discovery_retries", 0)
        self._thread = threading.Thread(target=self._run, name="ha-discovery", daemon=True)

    def start(self) -> HeldConfigs:
        """Start offering them again; returns itself."""
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Offer them no more (a newer announce of the same publisher takes their place)."""
        self._cancel.set()

    def _count(self, key: str, n: int) -> None:
        count = getattr(self.out, "add_count", None)
        if count is not None:
            count(key, n)

    def _run(self) -> None:
        while not self._cancel.wait(self._backoff.next()):
            self._count("discovery_retries", 1)
            try:
                self.out.publish_batch(self.msgs, self.on_durable)
            except PublisherClosed:
                break
            except OutputUnavailable as exc:
                log.debug("home assistant discovery: configs still refused: %s", exc)
                continue
            log.info("home assistant discovery: %d held configs taken", len(self.msgs))
            break
        self._count("discovery_held", -len(self.msgs))
        with _held_lock:
            if _held.get(id(self.out)) is self:
                del _held[id(self.out)]


_held: dict[int, HeldConfigs] = {}  # id(output) -> its configs held
_held_lock = threading.Lock()


def _hold(out: Output, held: HeldConfigs | None) -> None:
    """``out``'s held configs are ``held`` now; those held before are offered no more."""
    with _held_lock:
        old = _held.pop(id(out), None)
        if held is not None:
            _held[id(out)] = held
    if old is not None:
        old.cancel()


def announce(
    cfg: AppConfig,
    outputs: Iterable[Output],
    retry_min: float = RETRY_MIN_S,
    retry_max: float = RETRY_MAX_S,
) -> int:
    """Publish ``cfg``'s discovery configs through ``outputs`` and remove stale ones.

    The ledger is written once every output made them durable. Returns the messages sent.
    Never raises for an output that refuses them (its spool disk and outbox full): they are
    held and offered again (:class:`HeldConfigs`), every ``retry_min`` to ``retry_max`` s.
    """
    path = ledger_path(cfg)
    configs = discovery_configs(cfg)
    announced = read_ledger(path)
    msgs = discovery_messages(configs, announced)
    targets = list(outputs)
    if not msgs or not targets:
        return 0
    left = [len(targets)]

    def durable() -> None:
        left[0] -= 1
        if left[0] == 0:
            write_ledger(path, configs)

    for out in targets:
        try:
            out.publish_batch(msgs, durable)
            _hold(out, None)
        except OutputUnavailable as exc:
            log.warning(
                "home assistant discovery: %d configs held, offered again until taken: %s",
                len(msgs),
                exc,
            )
            held = HeldConfigs(out, msgs, durable, (retry_min, retry_max))
            _hold(out, held)
            held.start()
    log.info(
        "home assistant discovery: %d entities announced, %d removed",
        len(configs),
        len(msgs) - len(configs),
    )
    return len(msgs)
