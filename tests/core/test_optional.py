"""The optional parts' loader: one try per process, the off switch asked at every call."""

from __future__ import annotations

import importlib.util

import pytest

from cdml_edge.decode import jpeg
from cdml_edge.optional import OptionalPart, native_off


def test_a_part_is_loaded_once_and_kept() -> None:
    calls: list[int] = []

    def load() -> str:
        calls.append(1)
        return "part"

    part = OptionalPart(load, lambda: False)
    assert [part.get(), part.get()] == ["part", "part"]
    assert len(calls) == 1


@pytest.mark.parametrize("missing", ["none", "import error"])
def test_a_missing_part_is_tried_once(missing: str) -> None:
    calls: list[int] = []

    def load() -> None:
        calls.append(1)
        if missing == "import error":
            raise ImportError("no such module")

    part: OptionalPart[str] = OptionalPart(load, lambda: False)
    assert [part.get(), part.get()] == [None, None]
    assert len(calls) == 1


def test_the_switch_is_asked_at_every_call() -> None:
    switch = {"off": True}
    part = OptionalPart(lambda: "part", lambda: switch["off"])
    assert part.get() is None
    switch["off"] = False
    assert part.get() == "part"
    switch["off"] = True
    assert part.get() is None


def test_native_off_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
    assert native_off()
    monkeypatch.setenv("CDML_EDGE_NATIVE", "1")
    assert not native_off()
    monkeypatch.delenv("CDML_EDGE_NATIVE")
    assert not native_off()


def test_opencv_chosen_turns_libjpeg_turbo_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDML_EDGE_JPEG", "OpenCV")
    assert not jpeg.available() and jpeg.backend() == "opencv"
    monkeypatch.delenv("CDML_EDGE_JPEG")
    assert jpeg.available() is (importlib.util.find_spec("simplejpeg") is not None)
