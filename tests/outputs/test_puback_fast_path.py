"""The client's PUBACK fast path: what ``on_publish`` gets is what stock paho gives it.

A scripted broker on a real loopback socket answers each QoS 1 PUBLISH with the PUBACK bytes
of a list (successes in each form MQTT allows, a success-class code, refusals, a reason
string); stock paho's client and ours publish the same messages to it, and their
``on_publish`` calls are compared.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from helpers.mqtt_brokers import wait_until
from paho.mqtt.enums import CallbackAPIVersion

from cdml_edge.config import MqttConfig
from cdml_edge.outputs.mqtt.client import BrokerSettings, new_client


def _puback(mid: int, tail: bytes) -> bytes:
    body = struct.pack("!H", mid) + tail
    return bytes([0x40, len(body)]) + body


V5_TAILS = [
    b"",  # reason code left out: success
    b"\x00",  # success
    b"\x00\x00",  # success, no properties
    b"\x10",  # no matching subscribers: a success-class code
    b"\x87",  # not authorized
    b"\x87\x07\x1f\x00\x04nope",  # not authorized, with a reason string
    b"\x00\x07\x1f\x00\x04fine",  # success with a reason string
    b"\x97",  # quota exceeded
    b"\x10\x00",  # no matching subscribers, no properties
    b"\x00\x01",  # a property list that is not empty, cut short
]
V311_TAILS = [b"", b"", b""]


def _read_packet(conn: socket.socket) -> tuple[int, bytes] | None:
    first = conn.recv(1)
    if not first:
        return None
    length, shift = 0, 0
    while True:
        byte = conn.recv(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return first[0], body


class ScriptedBroker:
    """Accepts one client at a time; answers each QoS 1 PUBLISH with the next scripted PUBACK."""

    def __init__(self, tails: list[bytes]) -> None:
        self.tails = tails
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                self._session(conn)

    def _session(self, conn: socket.socket) -> None:
        v5 = False
        answered = 0
        while (packet := _read_packet(conn)) is not None:
            kind, body = packet
            if kind >> 4 == 1:  # CONNECT: protocol name, then the level
                v5 = body[2 + body[1]] == 5
                conn.sendall(b"\x20\x03\x00\x00\x00" if v5 else b"\x20\x02\x00\x00")
            elif kind >> 4 == 3:  # PUBLISH, QoS 1: topic, then the packet id
                topic_len = struct.unpack_from("!H", body)[0]
                mid = struct.unpack_from("!H", body, 2 + topic_len)[0]
                conn.sendall(_puback(mid, self.tails[answered % len(self.tails)]))
                answered += 1
            elif kind >> 4 == 12:  # PINGREQ
                conn.sendall(b"\xd0\x00")
            elif kind >> 4 == 14:  # DISCONNECT
                return

    def close(self) -> None:
        self.server.close()


def _acks_seen(client: Any, port: int, count: int) -> list[tuple[Any, ...]]:
    """Publish ``count`` QoS 1 messages; each ``on_publish`` call as comparable values."""
    seen: list[tuple[Any, ...]] = []
    objects: list[Any] = []

    def on_publish(c: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        objects.append(rc)
        seen.append((mid, rc.value, rc.is_failure, rc.getName(), props.json()))

    client.on_publish = on_publish
    client.connect("127.0.0.1", port, 30)
    client.loop_start()
    try:
        assert wait_until(client.is_connected, 10)
        for i in range(count):
            client.publish(f"t/{i}", b"x", qos=1)
        assert wait_until(lambda: len(seen) == count, 10), seen
    finally:
        client.disconnect()
        client.loop_stop()
    return seen


def _ours(protocol: str) -> Any:
    settings = BrokerSettings.from_config(
        MqttConfig(url="mqtt://127.0.0.1:1", protocol=protocol), f"t-{uuid.uuid4().hex[:8]}"
    )
    return new_client(settings, max_inflight=20, connect_timeout=5, will=None)


def _stock(protocol: str) -> Any:
    return mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"stock-{uuid.uuid4().hex[:8]}",
        protocol=mqtt.MQTTv5 if protocol == "5" else mqtt.MQTTv311,
    )


@pytest.mark.parametrize(("protocol", "tails"), [("5", V5_TAILS), ("3.1.1", V311_TAILS)])
def test_on_publish_gets_what_stock_paho_gives_for_every_puback_form(
    protocol: str, tails: list[bytes]
) -> None:
    broker = ScriptedBroker(tails)
    try:
        stock = _acks_seen(_stock(protocol), broker.port, len(tails))
        ours = _acks_seen(_ours(protocol), broker.port, len(tails))
    finally:
        broker.close()
    assert ours == stock
    if protocol == "5":
        failures = [mid for mid, _, failed, _, _ in ours if failed]
        assert failures == [5, 6, 8]  # the refusals stay refusals


def test_plain_successes_take_no_new_reason_code_objects() -> None:
    """The success forms share one reason code each: none is decoded per acknowledgement."""
    broker = ScriptedBroker([b"", b"\x00", b"\x00\x00", b"\x10", b"\x10\x00", b""])
    codes: list[Any] = []
    client = _ours("5")
    try:
        client.on_publish = lambda c, u, mid, rc, props: codes.append(rc)
        client.connect("127.0.0.1", broker.port, 30)
        client.loop_start()
        assert wait_until(client.is_connected, 10)
        for i in range(6):
            client.publish(f"t/{i}", b"x", qos=1)
        assert wait_until(lambda: len(codes) == 6, 10)
    finally:
        client.disconnect()
        client.loop_stop()
        broker.close()
    assert len({id(rc) for rc in codes}) == 2
    assert [rc.value for rc in codes] == [0, 0, 0, 0x10, 0x10, 0]
    assert not any(rc.is_failure for rc in codes)
