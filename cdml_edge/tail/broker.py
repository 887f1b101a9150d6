"""``cdml-edge tail`` following an appliance through its broker.

Subscribed (QoS 0, clean session, its own client id) to ``{prefix}/{device}/#`` with the
protocol the agent's config implies: 3.1.1 for ``mqtt.url: embedded`` (followed at
``--broker``), else ``mqtt.protocol`` (default 5). A broker that refuses an MQTT 5 CONNECT
with "unsupported protocol version" is tried again with 3.1.1. Reconnects are paho's (every
1 to 5 s); each connection, refusal and failure to reach the broker is noted in a
:class:`~cdml_edge.tail.link.Link`.

Whatever arrives is only read, never trusted: a message over ``MAX_PAYLOAD_BYTES`` is not
parsed, and it, one that is not JSON, or one the board cannot take is counted as ignored
while the subscription goes on; nothing a publisher sends stops the client's network thread.
(No Maximum Packet Size is asked for in the CONNECT: a 3.1.1-only broker then no longer
answers an MQTT 5 CONNECT with "unsupported protocol version", and the fallback to 3.1.1
needs that answer.)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from cdml_edge.config import MqttConfig
from cdml_edge.outputs.mqtt.client import BrokerSettings
from cdml_edge.outputs.mqtt.tls import MqttSetupError, parse_broker_url
from cdml_edge.tail.follow import Sink, parse_topic, shown
from cdml_edge.tail.link import CONNECTED, REFUSED, UNREACHABLE, Link, os_reason

UNSUPPORTED_VERSION = 132  # the MQTT 5 CONNACK reason code
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Larger messages are not read (an appliance's largest, a window's, is far smaller)."""

log = logging.getLogger(__name__)


def broker_settings(mqtt_cfg: MqttConfig, url: str | None) -> BrokerSettings:
    """The broker of ``mqtt_cfg``, at ``url`` when one is given.

    The embedded broker (MQTT 3.1.1 only) cannot be followed from outside the agent
    without ``url``: raises :class:`~cdml_edge.outputs.mqtt.tls.MqttSetupError`.
    """
    cfg = mqtt_cfg
    if url:
        embedded = mqtt_cfg.url == "embedded"
        cfg = mqtt_cfg.model_copy(
            update={"url": url, **({"protocol": "3.1.1"} if embedded else {})}
        )
    if cfg.url == "embedded":
        raise MqttSetupError(
            "mqtt.url is 'embedded' (in the agent, on a port of its own): "
            "give --broker URL or follow the output file with --file"
        )
    return BrokerSettings.from_config(cfg, "tail")


def _client(
    settings: BrokerSettings,
    protocol: str,
    base: str,
    sink: Sink,
    link: Link,
    refused_v5: threading.Event,
) -> Any:
    """A paho client subscribing to ``base#`` on each connection and noting it in ``link``.

    ``refused_v5`` is set when the broker refuses MQTT 5 as an unsupported version.
    """
    import paho.mqtt.client as paho

    v5 = protocol == "5"
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=f"cdml-edge-tail-{os.getpid()}",
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
    )
    client.reconnect_delay_set(1, 5)
    if settings.config.username is not None:
        client.username_pw_set(settings.config.username, settings.password)
    if settings.ssl is not None:
        client.tls_set_context(settings.ssl)

    def on_connect(c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        if getattr(rc, "is_failure", False):
            link.note(REFUSED, str(rc))
            if v5 and getattr(rc, "value", None) == UNSUPPORTED_VERSION:
                refused_v5.set()
            return
        link.note(CONNECTED, protocol=protocol)
        c.subscribe(base + "#", qos=0)

    def on_connect_fail(_c: Any, _u: Any) -> None:
        # paho calls this inside its ``except OSError`` around the connect: that error
        link.note(UNREACHABLE, os_reason(sys.exc_info()[1]))

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        try:
            parsed = parse_topic(msg.topic, base)
        except ValueError:  # a topic that is not UTF-8: no topic of the appliance's
            return
        if parsed is not None:  # a failure to show it is reported, never raised into paho
            shown(sink, parsed[0], parsed[1], _payload(msg.payload))

    client.on_connect = on_connect
    client.on_connect_fail = on_connect_fail
    client.on_disconnect = lambda _c, _u, _f, rc, _p=None: link.lost(str(rc))
    client.on_message = on_message
    return client


def _payload(data: bytes) -> Any:
    """The JSON of a message; ``None`` when it is too large or not JSON (counted ignored)."""
    if len(data) > MAX_PAYLOAD_BYTES:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
        return None


def subscribe_broker(
    settings: BrokerSettings, base: str, sink: Sink, stop: threading.Event, link: Link
) -> None:
    """Feed the messages under ``base`` from the broker of ``settings`` until ``stop``."""
    address = parse_broker_url(settings.config.url)
    protocol = settings.protocol
    while True:
        refused_v5 = threading.Event()
        client = _client(settings, protocol, base, sink, link, refused_v5)
        client.connect_async(address.host, address.port, keepalive=30)
        client.loop_start()
        try:
            while not stop.wait(0.1) and not refused_v5.is_set():
                pass
        finally:
            client.on_disconnect = None  # our own disconnect is no lost connection
            client.disconnect()
            client.loop_stop()
        if stop.is_set():
            return
        protocol = "3.1.1"  # MQTT 5 refused as an unsupported protocol version
