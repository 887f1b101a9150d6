"""Real MQTT brokers for the tests, a collecting subscriber, and test certificates.

The broker is a Mosquitto process per test, or amqtt where Mosquitto is not installed.

``CDML_TEST_BROKER=embedded`` forces the amqtt fallback even where Mosquitto exists.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from helpers.ports import restartable_port

SHARED_HOST, SHARED_PORT = "127.0.0.1", 1883


def mosquitto_binary() -> str | None:
    if os.environ.get("CDML_TEST_BROKER") == "embedded":
        return None
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.path.exists(p)),
        None,
    )


def broker_protocol() -> str:
    """MQTT version the test brokers speak: 5 (Mosquitto) or 3.1.1 (amqtt)."""
    return "5" if mosquitto_binary() else "3.1.1"


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def wait_until(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


@dataclass
class Tls:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def make_certs(folder: Path) -> Tls:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    def leaf(cn: str, ca_key: Any, ca_cert: Any, server: bool) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return key, builder.sign(ca_key, hashes.SHA256())

    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = make_ca("cdml-test-ca")
    s_key, s_cert = leaf("localhost", ca_key, ca_cert, server=True)
    c_key, c_cert = leaf("edge-client", ca_key, ca_cert, server=False)
    _, other = make_ca("unrelated-ca")
    return Tls(
        ca=write_cert(ca_cert, folder / "ca.pem"),
        server_cert=write_cert(s_cert, folder / "server.pem"),
        server_key=write_key(s_key, folder / "server.key"),
        client_cert=write_cert(c_cert, folder / "client.pem"),
        client_key=write_key(c_key, folder / "client.key"),
        other_ca=write_cert(other, folder / "other-ca.pem"),
    )


class BrokerProcess:
    """A broker on a free loopback port that a test may stop, kill and start again."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        tls: Tls | None = None,
        require_client_cert: bool = True,
        password_file: Path | None = None,
        acl_file: Path | None = None,
        unlimited_queues: bool = True,
        max_packet_size: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or restartable_port()
        self.tls = tls
        self.require_client_cert = require_client_cert
        self.password_file = password_file
        self.acl_file = acl_file  # Mosquitto reads it again on SIGHUP (:meth:`reload`)
        # no limit on queued / in-flight messages per client; Mosquitto 2.0.11 with
        # ``max_queued_messages 0`` also drops a client whose QoS 1 publish its ACL refused
        self.unlimited_queues = unlimited_queues
        self.max_packet_size = max_packet_size  # announced in MQTT 5 CONNACKs; larger: closed
        self.binary = mosquitto_binary()
        self.kind = "mosquitto" if self.binary else "embedded amqtt (mosquitto not installed)"
        self.proc: subprocess.Popen[bytes] | None = None
        print(f"[mqtt tests] broker: {self.kind} on 127.0.0.1:{self.port}")

    @property
    def is_mosquitto(self) -> bool:
        return self.binary is not None

    def _command(self) -> list[str]:
        if self.binary:
            conf = self.workdir / "mosquitto.conf"
            lines = [
                f"listener {self.port} 127.0.0.1",
                "persistence true",
                f"persistence_location {self.workdir}/",
                "autosave_interval 1",
                f"log_dest file {self.workdir / 'mosquitto.log'}",
            ]
            if self.unlimited_queues:
                lines += ["max_queued_messages 0", "max_inflight_messages 0"]
            if os.geteuid() == 0:  # otherwise it drops to user "mosquitto" and cannot read tmp
                lines.append("user root")
            if self.password_file is not None:
                lines += ["allow_anonymous false", f"password_file {self.password_file}"]
            else:
                lines.append("allow_anonymous true")
            if self.acl_file is not None:
                lines.append(f"acl_file {self.acl_file}")
            if self.max_packet_size is not None:
                lines.append(f"max_packet_size {self.max_packet_size}")
            if self.tls is not None:
                lines += [
                    f"cafile {self.tls.ca}",
                    f"certfile {self.tls.server_cert}",
                    f"keyfile {self.tls.server_key}",
                    f"require_certificate {'true' if self.require_client_cert else 'false'}",
                ]
            conf.write_text("\n".join(lines) + "\n")
            return [self.binary, "-c", str(conf)]
        cmd = [sys.executable, "-m", "cdml_edge.outputs.mqtt.embedded_broker", str(self.port)]
        if self.tls is not None:
            cmd += ["--tls", str(self.tls.server_cert), str(self.tls.server_key), str(self.tls.ca)]
        return cmd

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None
        log = open(self.workdir / "broker.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if not wait_until(lambda: port_open(self.port), 20):
            out = (self.workdir / "broker.out").read_text(errors="replace")
            raise RuntimeError(f"{self.kind} did not listen on {self.port}: {out[-2000:]}")
        return self

    def reload(self) -> None:
        """Mosquitto reads its ACL and password files again (SIGHUP)."""
        assert self.proc is not None and self.proc.poll() is None
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        """Graceful stop (Mosquitto saves its persistent sessions)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        wait_until(lambda: not port_open(self.port), 5)

    @property
    def protocol(self) -> str:
        return "5" if self.is_mosquitto else "3.1.1"

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"


class Subscriber:
    """Collects every message under ``topic`` (QoS 1, persistent session, fast reconnect)."""

    def __init__(
        self,
        port: int,
        topic: str,
        client_id: str | None = None,
        tls: Tls | None = None,
        persistent: bool = True,
    ) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self._lock = threading.Lock()
        self.topic = topic
        self.subscribed = threading.Event()
        cid = client_id or f"sub-{os.getpid()}-{time.monotonic_ns()}"
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=cid,
            protocol=mqtt.MQTTv311,
            clean_session=not persistent,
        )
        if tls is not None:
            self.client.tls_set(str(tls.ca), str(tls.client_cert), str(tls.client_key))
        self.client.reconnect_delay_set(0.05, 0.2)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect_async("127.0.0.1", port, keepalive=5)
        self.client.loop_start()
        if not self.subscribed.wait(15):
            raise RuntimeError(f"subscriber could not subscribe on port {port}")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if not rc.is_failure:
            client.subscribe(self.topic, qos=1)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.messages.append((msg.topic, bytes(msg.payload), bool(msg.retain)))

    def on(self, suffix: str) -> list[dict[str, Any]]:
        """JSON payloads of messages whose topic ends with ``suffix``."""
        with self._lock:
            return [json.loads(p) for t, p, _ in self.messages if t.endswith(suffix)]

    def ids(self, suffix: str = "/result") -> list[str]:
        return [m["id"] for m in self.on(suffix)]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class HeldProxy:
    """A TCP proxy to a broker on loopback that holds the broker's replies until :meth:`release`.

    What the client sends goes through at once, what the broker answers (CONNACK, PUBACKs)
    waits. Makes "the connection is not up yet" a state a test can hold.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.released = threading.Event()
        self.connected = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._socks += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()
            self.connected.set()

    def _pipe(self, src: socket.socket, dst: socket.socket, hold: bool) -> None:
        held: list[bytes] = []
        src.settimeout(0.05)
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                held.append(data)
            except TimeoutError:
                pass
            except OSError:
                break
            if held and (not hold or self.released.is_set()):
                try:
                    dst.sendall(b"".join(held))
                except OSError:
                    break
                held.clear()
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
