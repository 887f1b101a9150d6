"""``mqtt.format: sparkplug_b``: our messages as Sparkplug B, through the same publisher.

:class:`SparkplugOutput` formats each message (result, window, error and camera: DDATA of
the source's device; health: NDATA of the node; status: left out, the births and NDEATH say
it), none retained (a camera event is, in JSON), and hands them to the
:class:`~cdml_edge.outputs.mqtt.publisher.MqttPublisher`, whose
outbox, spool and at-least-once guarantees are unchanged. A message of another kind goes
out as it came.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from cdml_edge.config import AppConfig
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.outputs.sparkplug.node import DataMessage, SparkplugNode
from cdml_edge.outputs.sparkplug.proto import payload_class
from cdml_edge.outputs.tee import TeeOutput
from cdml_edge.supervisor import Spawn, plain_thread
from cdml_edge.window.topics import ABSOLUTE, OutMessage, absolute_topic, split_topic


class SparkplugOutput(TeeOutput):
    """An MQTT publisher whose messages are Sparkplug B (see the module docstring)."""

    def __init__(self, publisher: MqttPublisher, node: SparkplugNode) -> None:
        super().__init__([publisher])
        self.publisher = publisher
        self.node = node

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Format ``messages`` and queue them; ``on_durable`` as the publisher calls it.

        The births show the values of what the publisher sent (PUBACKed or spooled), never
        of what it refused or gave up on.
        """
        formatted = [self._format(m) for m in messages]
        out = [m for m, _ in formatted if m is not None]
        if not out:
            if on_durable is not None:
                on_durable()
            return
        data = {id(m): d for m, d in formatted if m is not None and d is not None}

        def sent(message: OutMessage) -> None:
            made = data.get(id(message))
            if made is not None:
                self.node.remember(made)

        self.publisher.publish_batch(out, on_durable, on_given_up, on_sent=sent)

    def format(self, message: OutMessage) -> OutMessage | None:
        """The Sparkplug message of ``message``; ``None`` for the status.

        Its values are not remembered for the births (:meth:`publish_batch` does that).
        """
        return self._format(message)[0]

    def _format(self, message: OutMessage) -> tuple[OutMessage | None, DataMessage | None]:
        """The Sparkplug message of ``message`` and, for an NDATA / DDATA, its values."""
        if message.topic[:1] == ABSOLUTE:
            return message, None
        kind, source = split_topic(message.topic)
        if kind == "status" and source is None:
            return None, None
        try:
            doc = json.loads(message.payload)
        except ValueError:
            return message, None
        data = self.node.data(kind, source, doc) if isinstance(doc, dict) else None
        if data is None:
            return message, None
        # never retained
        return OutMessage(absolute_topic(data.topic), data.payload, False, message.qos), data


BDSEQ_FILE = "sparkplug-bdseq"
"""The last ``bdSeq``, in the state folder."""
DEVICES_FILE = "sparkplug-devices.json"
"""Each device's block of aliases, in the state folder."""


def sparkplug_output(cfg: AppConfig, spawn: Spawn = plain_thread) -> SparkplugOutput:
    """The Sparkplug B output of ``cfg`` (``mqtt.format: sparkplug_b``).

    Raises :class:`~cdml_edge.outputs.sparkplug.proto.SparkplugUnavailable` without
    ``protobuf``.
    """
    assert cfg.mqtt is not None and cfg.state_dir is not None
    sp = cfg.mqtt.sparkplug
    payload_class()  # without protobuf: refused before the spool is opened (and locked)
    publisher = MqttPublisher(cfg.mqtt, cfg.device.id, cfg.spool, cfg.outbox, spawn=spawn)
    node = SparkplugNode(
        sp.group_id,
        sp.node_id or cfg.device.id,
        [s.name for s in cfg.sources],
        cfg.state_dir / BDSEQ_FILE,
        cfg.state_dir / DEVICES_FILE,
        # a device of the last run that is no source now is born while its data may wait
        keep_known=publisher.stats()["spool_records"] > 0,
    )
    publisher.session = node  # before start(): its client and I/O thread read it
    return SparkplugOutput(publisher, node)
