"""Broker address, TLS context and credentials from the ``mqtt`` configuration section."""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from cdml_edge.config import MqttConfig, TlsConfig
from cdml_edge.errors import CdmlError

log = logging.getLogger(__name__)


class MqttSetupError(CdmlError, ValueError):
    """The ``mqtt`` section cannot be turned into a connection; names the field."""


@dataclass(frozen=True)
class BrokerAddress:
    """Where the broker listens and whether it speaks TLS."""

    host: str
    port: int
    tls: bool


def parse_broker_url(url: str) -> BrokerAddress:
    """``mqtt://h:p`` / ``tcp://`` (plain, 1883) or ``mqtts://h:p`` / ``ssl://`` (TLS, 8883)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("mqtt", "tcp", "mqtts", "ssl") or not parts.hostname:
        raise MqttSetupError(f"mqtt.url: cannot use {url!r} (expected mqtt[s]://host[:port])")
    tls = scheme in ("mqtts", "ssl")
    return BrokerAddress(parts.hostname, parts.port or (8883 if tls else 1883), tls)


def tls_context(tls: TlsConfig | None) -> ssl.SSLContext:
    """Client TLS context: the CA (or system CAs), a client cert + key for mutual TLS.

    Certificate and host name checks are off only with ``tls.insecure: true``.
    """
    cafile = str(tls.ca) if tls is not None and tls.ca is not None else None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise MqttSetupError(f"mqtt.tls.ca: cannot load {cafile}: {exc}") from exc
    if tls is not None and tls.cert is not None and tls.key is not None:
        try:
            ctx.load_cert_chain(str(tls.cert), str(tls.key))
        except (OSError, ssl.SSLError) as exc:
            raise MqttSetupError(
                f"mqtt.tls.cert/key: cannot load {tls.cert} / {tls.key}: {exc}"
            ) from exc
    if tls is not None and tls.insecure:
        log.warning("mqtt.tls.insecure is set: the broker certificate is NOT checked")
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def resolve_password(config: MqttConfig) -> str | None:
    """The broker password from ``password_file``, ``password_env`` or (if allowed) the YAML."""
    if config.password_file is not None:
        try:
            return config.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise MqttSetupError(
                f"mqtt.password_file: cannot read {config.password_file}: {exc.strerror or exc}"
            ) from exc
    if config.password_env is not None:
        value = os.environ.get(config.password_env)
        if value is None:
            raise MqttSetupError(
                f"mqtt.password_env: environment variable {config.password_env} is not set"
            )
        return value
    if config.password is not None:
        if not config.allow_plaintext_password:
            raise MqttSetupError(
                "mqtt.password: a clear-text password is refused "
                "(use password_file or password_env, or set allow_plaintext_password: true)"
            )
        return config.password
    return None
