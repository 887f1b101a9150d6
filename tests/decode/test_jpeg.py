"""JPEG decoding at reduced scale and the area shrink, on real encoded images.

Decoding by libjpeg-turbo via simplejpeg, OpenCV the fallback; the shrink by the C core,
OpenCV the fallback.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from cdml_edge.decode import decode_image
from cdml_edge.decode import jpeg as jpeg_mod
from cdml_edge.decode.area import area_backend, shrink

# The documented tolerance of a reduced-scale decode + area shrink against a full decode +
# area shrink (docs/dataset.md, "Image decoding"): mean absolute difference and its 99th percentile,
# in levels of 0-255 (single pixels on sharp edges differ by up to ~40).
MEAN_TOL = 1.5
P99_TOL = 8


def _photo(w: int, h: int, seed: int) -> np.ndarray:
    """Camera-like RGB: smooth colour fields, edges and sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a, b, c = rng.uniform(0, 255, 3)
    img = np.stack([a * xx / w + (255 - a) * yy / h, b * yy / h, c * (1 - xx / w)], axis=-1)
    img[h // 3 : h // 2, w // 4 : w // 2] = rng.uniform(0, 255, 3)  # a sharp-edged block
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
    )
    assert ok
    return buf.tobytes()


def _full_then_area(data: bytes, target: tuple[int, int]) -> np.ndarray:
    """The reference: OpenCV's full decode, then OpenCV's area resize."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return cv2.resize(rgb, target, interpolation=cv2.INTER_AREA)


@pytest.fixture(params=["simplejpeg", "opencv"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    elif not jpeg_mod.available():
        pytest.fail("simplejpeg is a default dependency but is not installed")
    return str(request.param)


def test_backend_switch(backend: str) -> None:
    assert jpeg_mod.backend().startswith(backend)
    assert jpeg_mod.available() is (backend == "simplejpeg")


@pytest.mark.parametrize(
    ("size", "target", "decoded"),
    [
        ((224, 224), (64, 64), (224, 224)),  # 1/2 is 112 px, under twice the target
        ((224, 224), (128, 128), (224, 224)),
        ((224, 224), (56, 56), (112, 112)),  # 1/2
        ((224, 224), (28, 28), (56, 56)),  # 1/4
        ((640, 480), (64, 64), (320, 240)),  # 1/2: 1/4 is 120 px high, under 128
        ((640, 480), (48, 48), (160, 120)),  # 1/4
        ((1600, 1200), (100, 75), (200, 150)),  # 1/8
        ((225, 150), (29, 10), (113, 75)),  # rounded up, both axes covered twice
        ((640, 480), (160, 200), (640, 480)),  # the taller axis decides
        ((64, 64), (200, 200), (64, 64)),  # growing: full size
    ],
)
def test_scale_is_the_smallest_power_of_two_covering_twice_the_target(
    size: tuple[int, int], target: tuple[int, int], decoded: tuple[int, int]
) -> None:
    assert jpeg_mod.scaled_size(*size, target) == decoded
    data = _jpeg(_photo(*size, seed=1))
    out = jpeg_mod.decode_scaled(data, size, target)
    assert out is not None and out.dtype == np.uint8
    assert (out.shape[1], out.shape[0], out.shape[2]) == (*decoded, 3)


@pytest.mark.parametrize("target", [224, 160, 128, 96, 64, 32])
def test_reduced_decode_within_tolerance_of_full_decode(backend: str, target: int) -> None:
    """The documented tolerance, on both decoders, over several camera-like JPEGs.

    Reduced decode + shrink against OpenCV's full decode + INTER_AREA, on 224-px and 640x480
    images.
    """
    diffs = []
    for seed, size in enumerate([(224, 224), (224, 224), (640, 480), (300, 200)]):
        data = _jpeg(_photo(*size, seed=seed))
        got = decode_image(data, target_size=target)
        want = _full_then_area(data, (target, target)) if target < min(size) else None
        if want is None:
            want = decode_image(data, target_size=target, reduced=False)
        assert got.shape == want.shape == (target, target, 3)
        assert got.flags["C_CONTIGUOUS"]
        diffs.append(np.abs(got.astype(int) - want.astype(int)).ravel())
    d = np.concatenate(diffs)
    assert d.mean() <= MEAN_TOL, d.mean()
    assert np.percentile(d, 99) <= P99_TOL, np.percentile(d, 99)


def test_full_scale_decodes_agree_exactly() -> None:
    """Without a reduced scale both libraries run libjpeg(-turbo)'s accurate IDCT: same pixels.

    And the area shrink matches OpenCV's within one level.
    """
    data = _jpeg(_photo(224, 224, seed=3))
    ours = jpeg_mod.decode_scaled(data, (224, 224), None)
    assert ours is not None
    ref = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), 4)
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1
    got = decode_image(data, target_size=128)
    assert np.abs(got.astype(int) - _full_then_area(data, (128, 128)).astype(int)).max() <= 1


def test_grayscale_jpeg_becomes_rgb(backend: str) -> None:
    gray = _photo(96, 64, seed=4)[:, :, 0]
    ok, buf = cv2.imencode(".jpg", gray)
    out = decode_image(buf.tobytes(), target_size=(48, 32))
    assert out.shape == (32, 48, 3)
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()


def test_corrupt_scan_falls_back_to_opencv(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray restart marker in the entropy-coded data (end marker intact).

    libjpeg-turbo refuses it in strict mode and OpenCV decodes what it can, as it did alone.
    """
    data = bytearray(_jpeg(_photo(128, 128, seed=5)))
    mid = len(data) // 2
    data[mid : mid + 2] = b"\xff\xd0"
    assert jpeg_mod.decode_scaled(bytes(data), (128, 128), (64, 64)) is None
    got = decode_image(bytes(data), member="cam/1.jpg", target_size=64)
    monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    assert np.array_equal(got, decode_image(bytes(data), member="cam/1.jpg", target_size=64))
    assert got.shape == (64, 64, 3)


@pytest.mark.parametrize(
    ("src", "dst", "ch"),
    [
        ((224, 224), (128, 128), 3),
        ((140, 140), (128, 128), 3),
        ((84, 84), (64, 64), 3),
        ((640, 480), (64, 48), 3),
        ((500, 300), (17, 299), 3),
        ((33, 7), (1, 1), 3),
        ((140, 100), (99, 70), 1),
        ((90, 90), (45, 30), 4),
    ],
)
def test_area_shrink_matches_opencv(
    src: tuple[int, int], dst: tuple[int, int], ch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    shape = (src[1], src[0], ch) if ch > 1 else (src[1], src[0])
    img = rng.integers(0, 256, shape, dtype=np.uint8)
    ref = cv2.resize(img, dst, interpolation=cv2.INTER_AREA)
    assert area_backend() == "native"
    got = shrink(img, dst)
    assert got.shape == ref.shape and got.dtype == np.uint8
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    strided = np.ascontiguousarray(np.concatenate([img, img], axis=1))[:, : src[0]]
    assert np.array_equal(shrink(strided, dst), got)
    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
    assert area_backend() == "opencv"
    assert np.array_equal(shrink(img, dst), ref)


def test_area_shrink_refuses_growing() -> None:
    with pytest.raises(ValueError, match="larger"):
        shrink(np.zeros((10, 10, 3), np.uint8), (11, 5))


def test_area_shrink_saturates_white() -> None:
    img = np.full((141, 97, 3), 255, np.uint8)
    assert (shrink(img, (13, 128)) == 255).all()
