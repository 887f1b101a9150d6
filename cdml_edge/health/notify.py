"""sd_notify without libsystemd: the ``NOTIFY_SOCKET`` datagram protocol in pure Python.

systemd passes ``NOTIFY_SOCKET`` (a filesystem path, or ``@name`` for an abstract socket) to a
``Type=notify`` service; the service sends newline-separated ``KEY=VALUE`` datagrams to it.
With ``NOTIFY_SOCKET`` unset (not under systemd, tests, a laptop) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


def _socket_address(raw: str) -> str | bytes:
    """``@name`` is an abstract socket (leading NUL byte on the wire); anything else a path."""
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    return raw


SEND_TIMEOUT_S = 0.5
"""Longest wait for room in the notify socket's queue before a datagram is dropped."""


class SdNotifier:
    """Sends state changes to systemd's notify socket.

    Every method returns ``True`` when a datagram was sent and ``False`` when notifications are
    off (no ``NOTIFY_SOCKET``) or the send failed; failures are logged, never raised, so a gone
    supervisor can never take the pipeline down.

    Typical agent life cycle::

        notifier = SdNotifier()
        ...load models, run one warm-up inference...
        notifier.ready("running: 3 sources")
        ...                                   # ProgressWatchdog sends WATCHDOG=1
        notifier.reloading(); ...; notifier.ready()   # on SIGHUP
        notifier.stopping()                   # on SIGTERM, before draining
    """

    def __init__(
        self, socket_path: str | None = None, *, environ: Mapping[str, str] | None = None
    ) -> None:
        """``socket_path`` overrides ``NOTIFY_SOCKET``; ``environ`` defaults to ``os.environ``."""
        env = os.environ if environ is None else environ
        raw = socket_path if socket_path is not None else env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = _socket_address(raw) if raw else None
        self._environ = env
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """True when a notify socket is configured."""
        return self._address is not None

    def notify(self, *fields: str) -> bool:
        """Send one datagram made of ``KEY=VALUE`` lines (e.g. ``"READY=1"``, ``"STATUS=x"``)."""
        if self._address is None:
            return False
        payload = "\n".join(fields).encode()
        try:
            with self._lock:
                if self._sock is None:
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                    )
                    # A supervisor that stops reading must not stall the pipeline: a full
                    # socket queue drops this datagram after SEND_TIMEOUT_S instead.
                    self._sock.settimeout(SEND_TIMEOUT_S)
                self._sock.sendto(payload, self._address)
        except OSError as exc:
            log.warning("sd_notify to %r failed: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: call only after the models are loaded and one warm-up inference ran."""
        fields = ["READY=1"]
        if status:
            fields.append(f"STATUS={_one_line(status)}")
        return self.notify(*fields)

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: one keep-alive ping (normally sent by ``ProgressWatchdog``)."""
        return self.notify("WATCHDOG=1")

    def watchdog_trigger(self) -> bool:
        """``WATCHDOG=trigger``: ask systemd to treat the service as hung right now."""
        return self.notify("WATCHDOG=trigger")

    def status(self, text: str) -> bool:
        """``STATUS=...``: the free-form line ``systemctl status`` shows."""
        return self.notify(f"STATUS={_one_line(text)}")

    def stopping(self) -> bool:
        """``STOPPING=1``: the service began shutting down."""
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        """``RELOADING=1`` with ``MONOTONIC_USEC`` (needed by ``Type=notify-reload``).

        Send ``ready()`` again once the new configuration is in effect.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def extend_timeout(self, seconds: float) -> bool:
        """``EXTEND_TIMEOUT_USEC``: ask for more start/stop time (slow model loads on a Pi)."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def watchdog_interval(self) -> float | None:
        """``WATCHDOG_USEC`` in seconds when the watchdog is armed for this process, else None.

        Mirrors ``sd_watchdog_enabled()``: ignored when ``WATCHDOG_PID`` names another process.
        """
        raw_usec = self._environ.get("WATCHDOG_USEC", "")
        raw_pid = self._environ.get("WATCHDOG_PID", "")
        try:
            usec = int(raw_usec)
        except ValueError:
            return None
        if usec <= 0:
            return None
        if raw_pid:
            try:
                if int(raw_pid) != os.getpid():
                    return None
            except ValueError:
                return None
        return usec / 1_000_000

    def close(self) -> None:
        """Close the client socket (it is reopened on the next send)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _one_line(text: str) -> str:
    return " ".join(text.split())
