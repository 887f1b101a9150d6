"""The MQTT client's socket: chunked reads, gathered writes, the same bytes in the same order."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, broker_protocol, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.mqtt.batched_socket import BatchedSocket, gathered
from cdml_edge.outputs.mqtt.client import BrokerSettings, new_client
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage


def _publisher(url: str, prefix: str, spool: Path, keepalive: float = 5, qos: int = 1) -> Any:
    """A publisher to ``url`` (the broker's own protocol), reconnecting within a second."""
    return MqttPublisher(
        MqttConfig(
            url=url, topic_prefix=prefix, keepalive=keepalive, protocol=broker_protocol(), qos=qos
        ),
        "edge-1",
        SpoolConfig(dir=spool),
        backoff_max=0.5,
    )


class _Counting:
    """A socket whose ``send`` and ``recv`` calls are counted."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.sends = 0
        self.recvs = 0

    def send(self, data: Any) -> int:
        self.sends += 1
        return int(self.sock.send(data))

    def recv(self, n: int) -> bytes:
        self.recvs += 1
        return bytes(self.sock.recv(n))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.fixture
def pair() -> Any:
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_packets_that_arrived_together_are_read_with_one_recv(pair: Any) -> None:
    a, b = pair
    counted = _Counting(a)
    sock = BatchedSocket(counted)
    acks = b"".join(bytes([0x40, 2, 0, i]) for i in range(32))  # 32 PUBACKs
    b.sendall(acks)
    got = b""
    while len(got) < len(acks):  # as paho reads them: type byte, length byte, the rest
        got += sock.recv(1) + sock.recv(1) + sock.recv(2)
    assert got == acks
    assert counted.recvs == 1
    assert sock.pending() == 0
    with pytest.raises(BlockingIOError):  # nothing more: as the plain socket says it
        sock.recv(1)


def test_buffered_bytes_count_as_pending(pair: Any) -> None:
    a, b = pair
    sock = BatchedSocket(a)
    b.sendall(b"\x40\x02\x00\x01\x40\x02\x00\x02")
    assert sock.recv(4) == b"\x40\x02\x00\x01"
    assert sock.pending() == 4  # the network loop must not wait on select for these
    assert sock.recv(100) == b"\x40\x02\x00\x02"
    assert sock.pending() == 0


def test_an_end_of_stream_reads_as_empty(pair: Any) -> None:
    a, b = pair
    sock = BatchedSocket(a)
    b.close()
    assert sock.recv(1) == b""


def test_gathered_sends_leave_in_one_call_in_order(pair: Any) -> None:
    a, b = pair
    counted = _Counting(a)
    sock = BatchedSocket(counted)
    packets = [f"packet-{i};".encode() for i in range(50)]
    with gathered(sock):
        for p in packets:
            assert sock.send(p) == len(p)
        assert counted.sends == 0
    assert counted.sends == 1 and not sock.unsent()
    sock.send(b"after;")  # not gathering: sent at once
    assert counted.sends == 2
    b.settimeout(5)
    want = b"".join(packets) + b"after;"
    got = b""
    while len(got) < len(want):
        got += b.recv(65536)
    assert got == want


def test_a_send_behind_held_bytes_waits_for_them(pair: Any) -> None:
    a, b = pair
    sock = BatchedSocket(a)
    big = bytes(range(256)) * 40_000  # 10 MB: more than the socket buffers take
    with gathered(sock):
        sock.send(big)
    assert sock.unsent()
    with pytest.raises(BlockingIOError):  # not taken: paho keeps the packet, never reports
        sock.send(b"tail")  # it sent (a QoS 0 message would count as delivered)
    got = bytearray()
    b.settimeout(5)
    while len(got) < len(big):
        sock.flush()
        got += b.recv(1 << 20)
    assert not sock.unsent()
    assert sock.send(b"tail") == 4  # then sent at once, after the held bytes
    assert bytes(got) == big and b.recv(100) == b"tail"


def test_closing_sends_what_was_gathered_first(pair: Any) -> None:
    a, b = pair
    sock = BatchedSocket(a)
    sock.gathering = True  # as paho closes after its DISCONNECT, inside a turn
    sock.send(b"last words")
    sock.close()
    b.settimeout(5)
    assert b.recv(100) == b"last words"
    assert b.recv(100) == b""  # then closed


def test_a_failed_send_is_raised_by_the_next_read(pair: Any) -> None:
    a, b = pair
    sock = BatchedSocket(a)
    b.close()
    with gathered(sock):
        sock.send(b"x" * 100)
    # the peer is gone: the send fails (EPIPE / ECONNRESET), the bytes are dropped
    assert not sock.unsent()
    assert sock.pending() >= 1
    with pytest.raises(OSError):
        sock.recv(1)


def test_qos0_messages_are_done_only_once_the_kernel_has_them(tmp_path: Path) -> None:
    """A stalled broker: QoS 0 messages are not counted sent while held in memory."""
    broker = BrokerProcess(tmp_path / "broker").start()
    pub = _publisher(broker.url, "q0", tmp_path / "spool", keepalive=30, qos=0)
    pub.start()
    try:
        assert wait_until(lambda: pub.connected, 10)
        os.kill(broker.proc.pid, signal.SIGSTOP)
        n, size = 400, 100_000  # 40 MB: far more than the socket buffers hold
        done = threading.Event()
        pub.publish_batch([OutMessage("cam/result", b"x" * size) for _ in range(n)], done.set)
        time.sleep(3)
        sock = pub._client.socket() if pub._client is not None else None
        assert isinstance(sock, BatchedSocket)
        held = len(sock._wbuf)
        assert not done.is_set()
        assert pub.stats()["acked"] < n // 2, pub.stats()
        assert held <= pub.max_inflight * (size + 64), held  # one turn at most
        os.kill(broker.proc.pid, signal.SIGKILL)
        broker.proc.wait(10)
        assert wait_until(lambda: not pub.connected, 10)
        stats = pub.stats()
        # what the kernel never took is kept for the next connection, not counted sent
        assert wait_until(lambda: pub.stats()["spool_records"] + pub.stats()["acked"] >= n, 10), (
            stats
        )
    finally:
        pub.stop(timeout=1)
        broker.stop()


def test_a_window_of_publishes_is_one_send_and_its_acks_few_reads(broker_port: int) -> None:
    settings = BrokerSettings.from_config(
        MqttConfig(url=f"mqtt://127.0.0.1:{broker_port}", protocol=broker_protocol()),
        f"batched-{uuid.uuid4().hex[:8]}",
    )
    client = new_client(settings, max_inflight=64, connect_timeout=5, will=None)
    client.connect("127.0.0.1", broker_port, keepalive=5)
    assert wait_until(lambda: client.loop(0.05) is not None and client.is_connected(), 10)
    sock = client.socket()
    assert isinstance(sock, BatchedSocket)
    counted = _Counting(sock._sock)
    sock._sock = counted
    topic = f"t{uuid.uuid4().hex[:10]}/cam1/result"
    with gathered(sock):
        infos = [client.publish(topic, f'{{"n": {i}}}', qos=1) for i in range(32)]
    assert counted.sends == 1  # a plain paho socket: one send per PUBLISH, 32

    def all_acked() -> bool:
        client.loop(0.05)
        return all(i.is_published() for i in infos)

    assert wait_until(all_acked, 10)
    # a plain paho socket reads each PUBACK in three calls (type, length, the rest): 96
    assert counted.recvs < 96, counted.recvs
    client.disconnect()


def test_the_publisher_delivers_a_window_in_order_on_its_batched_socket(
    broker_port: int, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    sub = Subscriber(broker_port, f"{prefix}/#", persistent=False)
    pub = _publisher(f"mqtt://127.0.0.1:{broker_port}", prefix, tmp_path / "spool")
    pub.start()
    try:
        assert wait_until(lambda: pub.connected, 10)
        assert pub._client is not None and isinstance(pub._client.socket(), BatchedSocket)
        durable = threading.Event()
        messages = [OutMessage("cam1/result", f'{{"n": {i}}}'.encode()) for i in range(200)]
        pub.publish_batch(messages, durable.set)
        assert durable.wait(10)
        assert wait_until(lambda: len(sub.on("/cam1/result")) == 200, 10)
        assert [m["n"] for m in sub.on("/cam1/result")] == list(range(200))
        assert pub.stats()["acked"] >= 200
    finally:
        pub.stop()
        sub.close()
