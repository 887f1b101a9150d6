"""The broker: TCP, then the TLS handshake with the agent's own context, then an MQTT CONNECT."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time

from cdml_edge.config import MqttConfig
from cdml_edge.doctor.check import DEFAULT_TIMEOUT_S, Check, guard
from cdml_edge.outputs.mqtt.tls import (
    MqttSetupError,
    parse_broker_url,
    resolve_password,
    tls_context,
)


def check_broker(mqtt: MqttConfig | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Check]:
    """TCP, then the TLS handshake (the agent's own TLS context), then an MQTT CONNECT."""
    if mqtt is None:
        return [Check("broker", True, "no mqtt section: results go to the JSON-lines output")]
    if mqtt.url == "embedded":
        return [Check("broker", True, "embedded broker (runs inside the agent)")]
    try:
        address = parse_broker_url(mqtt.url)
        # The same rule as the publisher: a tls section turns TLS on for any scheme.
        tls = address.tls or mqtt.tls is not None
        ctx = tls_context(mqtt.tls) if tls else None
        password = resolve_password(mqtt)  # the agent refuses to start without it, too
    except MqttSetupError as exc:
        return [Check("broker", False, str(exc))]
    host, port = address.host, address.port
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return [Check("broker", False, f"{where} unreachable: {exc}")]
    checks: list[Check] = []
    if ctx is not None:
        try:
            with ctx.wrap_socket(sock, server_hostname=host) as tsock:
                version = tsock.version()
                cert = tsock.getpeercert() or {}
        except (ssl.SSLError, OSError, ValueError) as exc:
            sock.close()
            return [Check("broker tls", False, f"{where}: TLS handshake failed: {exc}")]
        who = _common_name(cert) or "unverified peer"
        checks.append(Check("broker tls", True, f"{where}: {version} handshake, server {who}"))
    else:
        sock.close()
    checks.append(
        guard("broker", lambda: _mqtt_connect(mqtt, host, port, ctx, password, timeout_s))
    )
    return checks


def _common_name(cert: object) -> str | None:
    if not isinstance(cert, dict):
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _mqtt_connect(
    mqtt: MqttConfig,
    host: str,
    port: int,
    ctx: ssl.SSLContext | None,
    password: str | None,
    timeout_s: float,
) -> Check:
    import paho.mqtt.client as paho

    v5 = (mqtt.protocol or "5") == "5"
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=f"cdml-edge-doctor-{os.getpid()}",
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
    )
    if mqtt.username:
        client.username_pw_set(mqtt.username, password)
    if ctx is not None:
        client.tls_set_context(ctx)
        if mqtt.tls is not None and mqtt.tls.insecure:
            client.tls_insecure_set(True)
    done = threading.Event()
    result: dict[str, str] = {}

    def on_connect(_c: object, _u: object, _f: object, rc: object, _p: object = None) -> None:
        result["rc"] = str(rc)
        result["failure"] = "1" if getattr(rc, "is_failure", False) else ""
        done.set()

    client.on_connect = on_connect
    t0 = time.perf_counter()
    try:
        client.connect(host, port, keepalive=max(5, int(mqtt.keepalive)))
    except (OSError, ssl.SSLError) as exc:
        return Check("broker", False, f"{host}:{port}: MQTT connect failed: {exc}")
    client.loop_start()
    try:
        if not done.wait(timeout_s):
            return Check("broker", False, f"{host}:{port}: no CONNACK within {timeout_s:g} s")
    finally:
        client.disconnect()
        client.loop_stop()
    ms = (time.perf_counter() - t0) * 1000
    proto = "MQTT 5" if v5 else "MQTT 3.1.1"
    if result.get("failure"):
        return Check("broker", False, f"{host}:{port}: {proto} CONNECT refused: {result['rc']}")
    return Check("broker", True, f"{host}:{port}: {proto} CONNACK in {ms:.0f} ms")
