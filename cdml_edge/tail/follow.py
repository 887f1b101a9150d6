"""Where ``cdml-edge tail`` reads an appliance's messages: its broker or its ``output.jsonl``.

Both feed ``(topic kind, source, payload)`` to a callback until a stop event is set.
Following a file starts at most ``BACKLOG_BYTES`` before its end (what was recent), reads
lines as they are appended and reopens the file when the output rotates it (``<path>.1``).
The broker is subscribed (QoS 0, clean session, its own client id) to
``{prefix}/{device}/#``; reconnects are paho's.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdml_edge.config import MqttConfig
from cdml_edge.outputs.mqtt.client import BrokerSettings
from cdml_edge.outputs.mqtt.tls import parse_broker_url
from cdml_edge.window.topics import split_topic

log = logging.getLogger(__name__)

BACKLOG_BYTES = 1024 * 1024
POLL_S = 0.2

Sink = Callable[[str, "str | None", dict[str, Any]], None]
"""Takes ``(kind, source, payload)``: ``("result", "cam", {...})``, ``("health", None, ...)``."""


def parse_topic(topic: str, base: str) -> tuple[str, str | None] | None:
    """``(kind, source)`` of a full topic under ``base`` (``{prefix}/{device}/``), else ``None``."""
    if not topic.startswith(base):
        return None
    return split_topic(topic[len(base) :])


def _feed_line(line: bytes, base: str, sink: Sink) -> bool:
    """One JSON line of ``output.jsonl`` into ``sink``; ``False`` if it is not one."""
    try:
        record = json.loads(line)
        parsed = parse_topic(record["topic"], base)
        if parsed is None or not isinstance(record.get("payload"), dict):
            return False
    except (ValueError, KeyError, TypeError):
        return False
    sink(parsed[0], parsed[1], record["payload"])
    return True


def follow_jsonl(path: Path, base: str, sink: Sink, stop: threading.Event) -> None:
    """Feed the lines of ``path`` (recent ones first, then new ones) until ``stop``."""
    fh = None
    ident: tuple[int, int] | None = None
    pending = b""
    while not stop.is_set():
        if fh is None:
            try:
                fh = open(path, "rb")  # noqa: SIM115 - kept open while following
            except FileNotFoundError:
                stop.wait(POLL_S)
                continue
            st = os.fstat(fh.fileno())
            first = ident is None
            ident = (st.st_dev, st.st_ino)
            if first and st.st_size > BACKLOG_BYTES:
                fh.seek(st.st_size - BACKLOG_BYTES)
                fh.readline()  # a partial line
        chunk = fh.read(65536)
        if chunk:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line.strip():
                    _feed_line(line, base, sink)
            continue
        if _rotated(path, ident, fh.tell()):
            fh.close()
            fh, pending = None, b""
            continue
        stop.wait(POLL_S)
    if fh is not None:
        fh.close()


def _rotated(path: Path, ident: tuple[int, int] | None, pos: int) -> bool:
    """Whether ``path`` is now another file, or shorter than where we are."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) != ident or st.st_size < pos


def _followed_broker(mqtt_cfg: MqttConfig, url: str | None) -> MqttConfig:
    """``mqtt_cfg`` pointed at ``url`` when one is given.

    An embedded broker cannot be followed from outside the agent without one.
    """
    cfg = mqtt_cfg.model_copy(update={"url": url}) if url else mqtt_cfg
    if cfg.url == "embedded":
        from cdml_edge.outputs.mqtt.tls import MqttSetupError

        raise MqttSetupError(
            "mqtt.url is 'embedded' (in the agent, on a port of its own): "
            "give --broker URL or follow the output file with --file"
        )
    return cfg


def subscribe_broker(
    mqtt_cfg: MqttConfig,
    base: str,
    sink: Sink,
    stop: threading.Event,
    url: str | None = None,
    on_state: Callable[[str], None] | None = None,
) -> None:
    """Feed the messages under ``base`` from the broker of ``mqtt_cfg`` (or ``url``) until ``stop``.

    Raises :class:`~cdml_edge.outputs.mqtt.tls.MqttSetupError` for a configuration it cannot
    use (the embedded broker without ``url``).
    """
    import paho.mqtt.client as paho

    cfg = _followed_broker(mqtt_cfg, url)
    settings = BrokerSettings.from_config(cfg, "tail")
    address = parse_broker_url(cfg.url)
    v5 = settings.protocol == "5"
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=f"cdml-edge-tail-{os.getpid()}",
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
    )
    if cfg.username is not None:
        client.username_pw_set(cfg.username, settings.password)
    if settings.ssl is not None:
        client.tls_set_context(settings.ssl)
    note = on_state or (lambda s: None)

    def on_connect(c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        if getattr(rc, "is_failure", False):
            note(f"refused: {rc}")
            return
        note("connected")
        c.subscribe(base + "#", qos=0)

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        parsed = parse_topic(msg.topic, base)
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            return
        if parsed is not None and isinstance(payload, dict):
            sink(parsed[0], parsed[1], payload)

    client.on_connect = on_connect
    client.on_disconnect = lambda *a: note("disconnected")
    client.on_message = on_message
    client.connect_async(address.host, address.port, keepalive=30)
    client.loop_start()
    try:
        stop.wait()
    finally:
        client.disconnect()
        client.loop_stop()
