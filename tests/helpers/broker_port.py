"""Fixture ``broker_port``: the shared Mosquitto on 127.0.0.1:1883, else a broker of our own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def broker_port(tmp_path: Path) -> Iterator[int]:
    """The shared Mosquitto on 127.0.0.1:1883, else a broker process of our own."""
    from helpers.mqtt_brokers import SHARED_PORT, BrokerProcess, mosquitto_binary, port_open

    if mosquitto_binary() and port_open(SHARED_PORT):
        print(f"[mqtt tests] broker: shared mosquitto on 127.0.0.1:{SHARED_PORT}")
        yield SHARED_PORT
        return
    broker = BrokerProcess(tmp_path / "broker").start()
    yield broker.port
    broker.stop()
