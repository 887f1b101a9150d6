"""Counting a JPEG's start-of-scan markers: the same count on small and large JPEGs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cdml_edge.decode import image_header
from cdml_edge.decode.image_header import SMALL_JPEG, count_scans


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
