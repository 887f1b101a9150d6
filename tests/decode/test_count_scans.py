"""Counting a JPEG's start-of-scan markers: the same count on small and large JPEGs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cdml_edge.decode import image_header
from cdml_edge.decode.image_header import SMALL_JPEG, count_scans
from cdml_edge.decode.native import helpers


def _by_numpy(data: bytes) -> int:
    a = np.frombuffer(data, np.uint8)
    return int(np.count_nonzero((a[:-1] == 0xFF) & (a[1:] == 0xDA)))


@pytest.mark.parametrize(
    "size", [0, 1, 2, 3, 100, SMALL_JPEG - 1, SMALL_JPEG, SMALL_JPEG + 1, 50_000]
)
def test_both_ways_count_the_same(size: int) -> None:
    rng = random.Random(size)
    alphabet = [0xFF, 0xDA, 0x00, 0xD8, 0x12]  # dense in FF, DA and FF FF DA runs
    data = bytes(rng.choice(alphabet) for _ in range(size))
    assert count_scans(data) == _by_numpy(data) == data.count(b"\xff\xda")


def test_a_small_jpeg_is_counted_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("NumPy used for a small JPEG")

    monkeypatch.setattr(image_header.np, "frombuffer", refuse)
    data = b"\xff\xd8" + b"\xff\xda\x00\x01" * 3 + b"\xff\xff\xda" + b"\xff\xd9"
    assert count_scans(data) == 4


@pytest.mark.parametrize("native", ["1", "0"], ids=["C helper", "NumPy"])
@pytest.mark.parametrize("size", [SMALL_JPEG + 1, SMALL_JPEG + 2, 50_001, 350_000])
def test_a_large_jpeg_counts_the_same_in_c_and_numpy(
    size: int, native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDML_EDGE_NATIVE", native)
    assert (helpers() is not None) == (native == "1")  # built by the install
    rng = random.Random(size)
    body = bytes(rng.choice([0xFF, 0xDA, 0x00, 0x12]) for _ in range(size))
    for data in (body, body + b"\xff", body + b"\xff\xda", b"\xda" + body[1:] + b"\xff"):
        assert count_scans(data) == _by_numpy(data) == data.count(b"\xff\xda")
        assert count_scans(bytearray(data)) == count_scans(memoryview(data)) == count_scans(data)
    assert count_scans(b"\x00" * size + b"\xff") == 0  # a last FF reads nothing past the end
    assert count_scans(b"\xff" * size) == 0
    assert count_scans(b"\xff\xda" * (size // 2)) == size // 2


def test_a_large_jpeg_is_counted_in_c_when_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("NumPy used where the C helper is built")

    monkeypatch.setattr(image_header.np, "frombuffer", refuse)
    data = b"\xff\xd8" + b"\x00" * SMALL_JPEG + b"\xff\xda\x00\x01" * 3 + b"\xff\xd9"
    assert count_scans(data) == 3
