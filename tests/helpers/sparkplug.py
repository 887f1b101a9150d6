"""Reading what a Sparkplug B edge node published, with an independent implementation.

Messages are decoded by ``pysparkplug`` (its own protobuf code, not ours): births as they
come, data with the last birth of its node or device (names and types from aliases). Births
are QoS 0, so a subscriber that was away when they went out (a persistent session gets the
QoS 1 data it missed, never QoS 0) decodes data with the node's next birth, and asks for one
(NCMD ``Node Control/Rebirth``, as a host application does) when none came at all.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
import pysparkplug as spb

from helpers.mqtt_brokers import Subscriber


@dataclass(frozen=True)
class Received:
    """One message as the subscriber got it, decoded."""

    topic: spb.Topic
    payload: Any
    raw: bytes
    qos: int
    retain: bool

    @property
    def kind(self) -> str:
        return str(self.topic.message_type)

    def metrics(self) -> dict[str, Any]:
        """Metric name -> value (``None`` when null)."""
        return {m.name: None if m.is_null else m.value for m in self.payload.metrics}


class SparkplugSubscriber(Subscriber):
    """A subscriber to ``spBv1.0/{group}/#`` that keeps each message's QoS too."""

    def __init__(self, port: int, group: str, **kw: Any) -> None:
        self.qos: list[int] = []
        self.port = port
        self.group = group
        super().__init__(port, f"spBv1.0/{group}/#", **kw)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.messages.append((msg.topic, bytes(msg.payload), bool(msg.retain)))
            self.qos.append(int(msg.qos))

    def decoded(self) -> list[Received]:
        """Every message so far, decoded in arrival order."""
        with self._lock:
            raw = list(zip(self.messages, self.qos, strict=False))
        births: dict[tuple[str | None, str | None], Any] = {}
        for (topic_str, payload, _), _ in raw:  # the births a subscriber away missed: the next
            topic = spb.Topic.from_str(topic_str)
            kind = topic.message_type
            if kind in (spb.MessageType.NBIRTH, spb.MessageType.DBIRTH):
                births.setdefault(
                    (topic.edge_node_id, topic.device_id), kind.payload.decode(payload)
                )
        out: list[Received] = []
        for (topic_str, payload, retain), qos in raw:
            topic = spb.Topic.from_str(topic_str)
            kind = topic.message_type
            key = (topic.edge_node_id, topic.device_id)
            if kind in (spb.MessageType.NBIRTH, spb.MessageType.DBIRTH):
                decoded = kind.payload.decode(payload)
                births[key] = decoded
            elif kind in (spb.MessageType.NDATA, spb.MessageType.DDATA):
                decoded = kind.payload.decode(payload, birth=births[key])
            else:
                decoded = kind.payload.decode(payload)
            out.append(Received(topic, decoded, payload, qos, retain))
        return out

    def unborn(self) -> set[str]:
        """Nodes with data but no birth received."""
        with self._lock:
            topics = [spb.Topic.from_str(t) for t, _, _ in self.messages]
        born = {t.edge_node_id for t in topics if t.message_type == spb.MessageType.NBIRTH}
        return {str(t.edge_node_id) for t in topics if t.edge_node_id not in born}

    def ids(self, suffix: str = "/result") -> list[str]:
        """As :meth:`result_ids`; a node whose births this subscriber missed is asked again."""
        for node in self.unborn():
            send(self.port, f"spBv1.0/{self.group}/NCMD/{node}", rebirth_command())
            deadline = time.monotonic() + 5
            while node in self.unborn() and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.result_ids()

    def result_ids(self) -> list[str]:
        """The ``result/id`` of every DDATA that carries one."""
        return [
            str(r.metrics()["result/id"])
            for r in self.decoded()
            if r.kind == "DDATA" and "result/id" in r.metrics()
        ]


def rebirth_command() -> bytes:
    """An NCMD payload asking for a rebirth, as a host application sends it."""
    metric = spb.Metric(
        timestamp=spb.get_current_timestamp(),
        name="Node Control/Rebirth",
        datatype=spb.DataType.BOOLEAN,
        value=True,
    )
    return spb.NCmd(timestamp=spb.get_current_timestamp(), metrics=(metric,)).encode(
        include_dtypes=True
    )


def send(port: int, topic: str, payload: bytes) -> None:
    """Publish one message (QoS 1) and wait for its PUBACK."""
    done = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    client.on_publish = lambda *a: done.set()
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.publish(topic, payload, qos=1)
    done.wait(10)
    client.loop_stop()
    client.disconnect()
