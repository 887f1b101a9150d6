"""Fixtures of the archive tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cdml_edge.archive import sealing


@pytest.fixture
def held_seals(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Seal threads wait at their ``fsync`` until the event is set (set at the end anyway)."""
    gate = threading.Event()
    real_fsync = sealing.os.fsync

    def slow_fsync(fd: int) -> None:
        if threading.current_thread().name == "seal-copy":
            gate.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(sealing.os, "fsync", slow_fsync)
    yield gate
    gate.set()
