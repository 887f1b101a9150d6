"""The publisher's paho client: settings, the client, its network loop and reconnect backoff.

How to reach the broker, the client built for it, one turn of its network loop driven by
``select`` (interruptible by a :class:`Waker`), and the reconnect backoff.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from cdml_edge.config import MqttConfig
from cdml_edge.outputs.mqtt.batched_socket import BatchedSocket
from cdml_edge.outputs.mqtt.tls import (
    BrokerAddress,
    MqttSetupError,
    parse_broker_url,
    resolve_password,
    tls_context,
)


@dataclass(frozen=True)
class BrokerSettings:
    """The ``mqtt`` section resolved once.

    Address (``None`` for the embedded broker), protocol, credentials, TLS context and
    client id.
    """

    config: MqttConfig
    embedded: bool
    protocol: str  # "5" or "3.1.1"
    address: BrokerAddress | None
    password: str | None
    ssl: ssl.SSLContext | None
    client_id: str

    @classmethod
    def from_config(cls, config: MqttConfig, device_id: str) -> BrokerSettings:
        """Resolve ``config``; raises :class:`MqttSetupError` naming the field at fault."""
        embedded = config.url == "embedded"
        if embedded and config.protocol == "5":
            raise MqttSetupError("mqtt.protocol: the embedded broker speaks MQTT 3.1.1 only")
        address = None if embedded else parse_broker_url(config.url)
        use_tls = config.tls is not None or (address is not None and address.tls)
        return cls(
            config=config,
            embedded=embedded,
            protocol="3.1.1" if embedded else (config.protocol or "5"),
            address=address,
            password=resolve_password(config),
            ssl=tls_context(config.tls) if use_tls and not embedded else None,
            client_id=config.client_id or f"cdml-edge-{device_id}",
        )

    def url(self) -> str:
        """``mqtt[s]://host:port`` of an external broker."""
        assert self.address is not None
        scheme = "mqtts" if self.ssl is not None else "mqtt"
        return f"{scheme}://{self.address.host}:{self.address.port}"


_PLAIN_ACKS = {
    code: (ReasonCode(PacketTypes.PUBACK, identifier=code), Properties(PacketTypes.PUBACK))
    for code in (0x00, 0x10)  # success; no matching subscribers (a success too)
}
"""What ``on_publish`` gets for a plain successful PUBACK, by reason code: one pair each,
shared (read, never changed; the publisher reads ``is_failure``)."""

_PAHO_PARTS = ("_in_packet", "_protocol", "_out_message_mutex", "_out_messages", "_easy_log")


def plain_success(packet: bytes | bytearray, v5: bool) -> tuple[int, int] | None:
    """``(packet id, reason code)`` of a PUBACK body that says plain success, else ``None``.

    Plain success: the id alone (either protocol; code 0), or in MQTT 5 the id, a code of
    :data:`_PLAIN_ACKS` and at most an empty property list. Anything else (a refusal, a
    reason string, a malformed body) is left to paho.
    """
    n = len(packet)
    if n == 2:
        return int.from_bytes(packet[:2], "big"), 0
    if v5 and (n == 3 or (n == 4 and packet[3] == 0)) and packet[2] in _PLAIN_ACKS:
        return int.from_bytes(packet[:2], "big"), packet[2]
    return None


def publish_packet_size(topic: str, payload_len: int, qos: int, v5: bool) -> int:
    """Bytes of the PUBLISH packet paho sends for ``topic`` and a ``payload_len``-byte payload.

    Fixed header, topic, packet id (QoS 1 and 2) and, in MQTT 5, the empty property list:
    what a broker compares with the Maximum Packet Size its CONNACK announced.
    """
    remaining = 2 + len(topic.encode("utf-8")) + (2 if qos > 0 else 0) + (1 if v5 else 0)
    remaining += payload_len
    length_bytes = 1
    while remaining >= 128**length_bytes and length_bytes < 4:
        length_bytes += 1
    return 1 + length_bytes + remaining


def announced_max_packet(props: Any) -> int | None:
    """The Maximum Packet Size of an MQTT 5 CONNACK's properties, or ``None`` (no limit)."""
    value = getattr(props, "MaximumPacketSize", None)
    return int(value) if isinstance(value, int) and value > 0 else None


class _Client(mqtt.Client):
    """paho's client on a :class:`BatchedSocket`, with a cheaper plain-success PUBACK.

    paho decodes every PUBACK into new ``ReasonCode`` and ``Properties`` objects (39-50 µs
    a PUBACK, two per item by default); a plain success is answered with a pair of
    :data:`_PLAIN_ACKS` instead, the same values. Other PUBACKs, and a paho without the
    parts used here, take paho's own way.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain_acks = all(hasattr(self, name) for name in _PAHO_PARTS)

    def _create_socket(self) -> Any:
        return BatchedSocket(super()._create_socket())

    def _handle_pubackcomp(self, cmd: Any) -> MQTTErrorCode:
        if cmd == "PUBACK" and self._plain_acks:
            plain = plain_success(self._in_packet["packet"], self._protocol == mqtt.MQTTv5)
            if plain is not None:
                mid, code = plain
                self._easy_log(mqtt.MQTT_LOG_DEBUG, "Received %s (Mid: %d)", cmd, mid)
                with self._out_message_mutex:
                    if mid in self._out_messages:  # told once, as paho does
                        return self._do_on_publish(mid, *_PLAIN_ACKS[code])
                return MQTTErrorCode.MQTT_ERR_SUCCESS
        return super()._handle_pubackcomp(cmd)

    def _handle_pubrec(self) -> MQTTErrorCode:
        """A PUBREC that refuses a QoS 2 message ends its exchange, as MQTT 5 says (4.3.3).

        paho ignores the code and goes on with PUBREL, so a refused message was reported
        delivered. Here ``on_publish`` gets the refusal, and no PUBREL is sent.
        """
        packet = self._in_packet["packet"] if self._plain_acks else b""
        v5 = self._plain_acks and self._protocol == mqtt.MQTTv5
        if v5 and len(packet) >= 3 and packet[2] >= 0x80:
            mid = int.from_bytes(packet[:2], "big")
            refusal = ReasonCode(PacketTypes.PUBREC, identifier=packet[2])
            with self._out_message_mutex:
                if mid in self._out_messages:
                    return self._do_on_publish(mid, refusal, Properties(PacketTypes.PUBREC))
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        return super()._handle_pubrec()


def new_client(
    settings: BrokerSettings,
    *,
    max_inflight: int,
    connect_timeout: float,
    will: tuple[str, bytes] | None,
    clean: bool = False,
) -> mqtt.Client:
    """A paho client for ``settings`` with a persistent session (``clean``: none kept).

    It has a retained QoS 1 Last Will ``will = (topic, payload)`` (none when ``None``), no
    paho-side queue and ``max_inflight`` message ids. ``clean`` (Sparkplug B) asks for
    Clean Session in MQTT 3.1.1; in MQTT 5 :func:`connect_later` asks for Clean Start.
    """
    v5 = settings.protocol == "5"
    kwargs: dict[str, Any] = {
        "callback_api_version": CallbackAPIVersion.VERSION2,
        "client_id": settings.client_id,
        "protocol": mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
    }
    if not v5:
        kwargs["clean_session"] = clean
    client = _Client(**kwargs)
    client.max_inflight_messages_set(max_inflight)
    client.max_queued_messages_set(0)
    client.connect_timeout = connect_timeout
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    if settings.config.username is not None:
        client.username_pw_set(settings.config.username, settings.password)
    if settings.ssl is not None:
        client.tls_set_context(settings.ssl)
    client.on_socket_open = no_delay
    return client


def connect_later(
    client: mqtt.Client, settings: BrokerSettings, host: str, port: int, clean: bool = False
) -> None:
    """Set where ``client.reconnect()`` connects; nothing is sent yet.

    With MQTT 5 the session outlives the connection for ``session_expiry`` seconds; with
    ``clean`` (Sparkplug B) every CONNECT has Clean Start and a Session Expiry Interval of 0.
    """
    keepalive = max(1, int(settings.config.keepalive))
    if settings.protocol == "5":
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if clean else int(settings.config.session_expiry)
        client.connect_async(host, port, keepalive, clean_start=clean, properties=props)
    else:
        client.connect_async(host, port, keepalive)


def no_delay(client: Any, userdata: Any, sock: Any) -> None:
    """Small PUBLISH packets go out at once (no Nagle delay behind unacknowledged data)."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Waker:
    """A self-pipe that interrupts the I/O thread's ``select`` (new messages, stop)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.sleeping = False
        """The I/O thread is in (or about to enter) its wait: :meth:`nudge` must write."""

    def fileno(self) -> int:
        """The read end, for ``select``."""
        return self._r

    def wake(self) -> None:
        """Make the read end readable (never blocks; a full pipe is awake already)."""
        with contextlib.suppress(OSError):
            os.write(self._w, b"x")

    def nudge(self) -> None:
        """Wake the I/O thread only if it sleeps: an awake one looks for work before it does.

        For work it finds with ``poll``'s ``work_waiting``: the thread sets :attr:`sleeping`
        first and looks after, so work queued before the look is seen and work queued after
        finds :attr:`sleeping` set.
        """
        if self.sleeping:
            self.wake()

    def clear(self) -> None:
        """Drain the read end: the next wait sleeps again."""
        with contextlib.suppress(OSError):
            while os.read(self._r, 4096):
                pass

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return early when woken."""
        with contextlib.suppress(OSError, ValueError):
            ready, _, _ = select.select([self._r], [], [], max(0.0, seconds))
            if ready:
                self.clear()

    def close(self) -> None:
        """Close both ends of the pipe."""
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


def poll(client: mqtt.Client, waker: Waker, work_waiting: Callable[[], bool] | None = None) -> None:
    """One turn of ``client``'s network loop: wait, then read, write and keep alive.

    It waits for the client's socket or ``waker``: at most 0.25 s; not at all while TLS
    holds decrypted bytes or ``work_waiting()`` (asked once :attr:`Waker.sleeping` is set).
    """
    sock = client.socket()
    if sock is None:
        return
    waker.sleeping = True
    pending_tls = getattr(sock, "pending", None)
    busy = (pending_tls is not None and pending_tls() > 0) or (
        work_waiting is not None and work_waiting()
    )
    timeout = 0.0 if busy else 0.25
    fileno = sock.fileno()
    batched = sock if isinstance(sock, BatchedSocket) else None
    unsent = batched is not None and batched.unsent()
    wlist = [fileno] if unsent or client.want_write() else []
    try:
        readable, _, _ = select.select([fileno, waker.fileno()], wlist, [], timeout)
    except (OSError, ValueError):
        readable = [fileno]
    finally:
        waker.sleeping = False
    if waker.fileno() in readable:
        waker.clear()
    if batched is not None and unsent:
        batched.flush()
    if fileno in readable or timeout == 0.0:
        client.loop_read()
    if client.socket() is not None and client.want_write():
        client.loop_write()
    if client.socket() is not None:
        client.loop_misc()
