"""An embedded MQTT 3.1.1 broker (amqtt) for the demo and for a laptop: ``mqtt.url: embedded``.

It runs in-process on its own asyncio loop in a daemon thread and listens on loopback only.
Production configurations point at Mosquitto.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from typing import Any

from cdml_edge.errors import CdmlError

log = logging.getLogger(__name__)

DEFAULT_EMBEDDED_PORT = 1883


class EmbeddedBrokerError(CdmlError, RuntimeError):
    """The embedded broker could not start (port taken, amqtt missing, ...)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP socket can bind ``port`` on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class EmbeddedBroker:
    """amqtt on ``host:port`` (port 0: 1883 when free, else any free port).

    ``tls`` (``certfile``, ``keyfile``, optional ``cafile``) makes it a TLS listener; amqtt
    asks for a client certificate but does not require one.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, tls: dict[str, str] | None = None
    ) -> None:
        if port == 0:
            port = DEFAULT_EMBEDDED_PORT if port_is_free(DEFAULT_EMBEDDED_PORT, host) else 0
            port = port or free_port(host)
        self.host = host
        self.port = port
        self.tls = tls
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Any = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """``mqtt://host:port``, or ``mqtts://`` with TLS."""
        scheme = "mqtts" if self.tls else "mqtt"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> EmbeddedBroker:
        """Start the broker thread; returns once it accepts connections."""
        try:
            from amqtt.broker import Broker  # noqa: F401
        except ImportError as exc:  # pragma: no cover - amqtt is a dependency
            raise EmbeddedBrokerError(f"amqtt is not installed: {exc}") from exc
        for name in ("amqtt", "transitions"):  # chatty at INFO; keep the agent's log readable
            lib = logging.getLogger(name)
            if lib.level == logging.NOTSET:
                lib.setLevel(logging.WARNING)
        self._thread = threading.Thread(target=self._run, name="embedded-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise EmbeddedBrokerError(f"embedded broker on {self.url} did not start in {timeout}s")
        if self._error is not None:
            raise EmbeddedBrokerError(f"embedded broker on {self.url}: {self._error}")
        log.info("embedded MQTT broker listening on %s", self.url)
        return self

    def _run(self) -> None:
        from amqtt.broker import Broker

        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        listener: dict[str, Any] = {"type": "tcp", "bind": f"{self.host}:{self.port}"}
        if self.tls:
            listener.update({"ssl": True, **self.tls})
        config = {
            "listeners": {"default": listener},
            "plugins": {
                "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True},
            },
        }

        async def boot() -> None:
            self._broker = Broker(config, loop=loop)
            await self._broker.start()

        try:
            loop.run_until_complete(boot())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Shut the broker down and join its thread."""
        loop, broker = self._loop, self._broker
        if loop is None or self._thread is None:
            return
        if broker is not None and loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(broker.shutdown(), loop)
            with contextlib.suppress(Exception):
                fut.result(timeout)
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Run a broker until killed; its URL is printed first.

    ``python -m cdml_edge.outputs.mqtt.embedded_broker [PORT] [--tls CERT KEY [CA]]``.
    """
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m cdml_edge.outputs.mqtt.embedded_broker")
    parser.add_argument("port", type=int, nargs="?", default=0)
    parser.add_argument("--tls", nargs="+", metavar="FILE", help="CERT KEY [CA]")
    args = parser.parse_args(argv)
    tls = None
    if args.tls:
        tls = {"certfile": args.tls[0], "keyfile": args.tls[1]}
        if len(args.tls) > 2:
            tls["cafile"] = args.tls[2]
    broker = EmbeddedBroker(port=args.port, tls=tls).start()
    print(broker.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        broker.stop()


if __name__ == "__main__":
    main()
