"""``cdml-edge tail``: follow an appliance onto the activity board, show the board every interval.

The appliance is followed through its broker or its ``output.jsonl``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdml_edge.config import AppConfig, ConfigError, MqttConfig
from cdml_edge.health.board import ActivityBoard
from cdml_edge.tail.broker import broker_settings, subscribe_broker
from cdml_edge.tail.follow import follow_jsonl
from cdml_edge.tail.link import Link
from cdml_edge.window.topics import topic_base


@dataclass(frozen=True)
class Followed:
    """What ``tail`` reads: a file, or the broker (``broker`` overrides ``mqtt.url``)."""

    file: Path | None = None
    broker: str | None = None

    def describe(self, cfg: AppConfig) -> str:
        """The file followed, or the broker URL (``broker``, else the config's ``mqtt.url``)."""
        if self.file is not None:
            return str(self.file)
        assert cfg.mqtt is not None
        return self.broker or cfg.mqtt.url


def choose(cfg: AppConfig, file: Path | None, broker: str | None, where: str) -> Followed:
    """The broker when the config has one (or ``broker`` is given), else ``output.jsonl``."""
    if file is not None:
        return Followed(file=file)
    if cfg.mqtt is not None or broker is not None:
        return Followed(broker=broker)
    if cfg.output.jsonl in (None, "-"):
        raise ConfigError(
            where,
            [
                (
                    "output.jsonl",
                    "no broker and no output file to follow (the agent prints to stdout)",
                )
            ],
        )
    return Followed(file=Path(cfg.output.jsonl))


class Follower:
    """A daemon thread feeding ``board`` from ``followed`` until :attr:`stop` is set.

    An error that ends it is kept in :attr:`error`. Following a broker, :attr:`link` says
    whether it is connected, and why not; a broker setting it cannot use (the embedded broker
    without ``--broker``) raises :class:`~cdml_edge.outputs.mqtt.tls.MqttSetupError` here.
    """

    def __init__(self, cfg: AppConfig, followed: Followed, board: ActivityBoard) -> None:
        self.cfg, self.followed, self.board = cfg, followed, board
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.link: Link | None = None
        if followed.file is None:
            self._settings = broker_settings(cfg.mqtt or MqttConfig(), followed.broker)
            self.link = Link(self._settings.config.url, self._settings.protocol)
        self._thread = threading.Thread(target=self._run, name="tail-follow", daemon=True)

    def start(self) -> Follower:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Set :attr:`stop` and wait up to 5 s for the thread to end."""
        self.stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        cfg, followed = self.cfg, self.followed
        base = topic_base(cfg.mqtt.topic_prefix if cfg.mqtt else "cdml", cfg.device.id)
        try:
            if self.link is None:
                assert followed.file is not None
                follow_jsonl(followed.file, base, self.board.observe, self.stop)
            else:
                subscribe_broker(self._settings, base, self.board.observe, self.stop, self.link)
        except Exception as exc:  # raised again by run_tail
            self.error = exc
            self.stop.set()


def run_tail(
    cfg: AppConfig,
    followed: Followed,
    show: Callable[[dict[str, Any]], None],
    *,
    interval: float = 1.0,
    duration: float | None = None,
) -> dict[str, Any]:
    """Follow until ``duration`` (or Ctrl-C), calling ``show(snapshot)`` every ``interval``.

    A snapshot is the board's with ``link``: the broker link's state (``None`` following a
    file). Returns the last snapshot. A follow error (a refused broker setting) is raised.
    """
    board = ActivityBoard(cfg.device.id)
    follower = Follower(cfg, followed, board).start()
    link = follower.link

    def snapshot() -> dict[str, Any]:
        return {**board.snapshot(), "link": None if link is None else link.view()}

    stop = follower.stop
    end = None if duration is None else time.monotonic() + duration
    try:
        while not stop.is_set():
            left = interval if end is None else min(interval, end - time.monotonic())
            if stop.wait(max(0.0, left)):
                break
            show(snapshot())
            if end is not None and time.monotonic() >= end:
                break
    except KeyboardInterrupt:
        pass
    finally:
        follower.close()
    if follower.error is not None:
        raise follower.error
    return snapshot()
