"""EXIF orientation: one image for every backend (libjpeg-turbo, OpenCV, reduced scale).

Each of the eight orientations is written into a JPEG's APP1 segment; OpenCV's own
``imdecode`` (which applies the tag) is the independent reference.
"""

from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest

from cdml_edge.decode import decode_image
from cdml_edge.decode.orientation import exif_orientation, orient

W, H = 96, 64  # not square, so a quarter turn shows


def _pattern() -> np.ndarray:
    """An RGB image no flip or turn maps onto itself: gradients and a corner block."""
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([x * 255 // W, y * 255 // H, (x + 2 * y) % 256], axis=-1).astype(np.uint8)
    img[:16, :24] = (250, 20, 20)
    return img


def _with_orientation(jpeg: bytes, code: int, order: str = ">") -> bytes:
    """``jpeg`` with an EXIF APP1 segment holding ``Orientation = code`` after its SOI."""
    magic = b"MM\0*" if order == ">" else b"II*\0"
    entry = struct.pack(order + "HHIHH", 0x0112, 3, 1, code, 0)
    tiff = magic + struct.pack(order + "I", 8) + struct.pack(order + "H", 1) + entry
    tiff += struct.pack(order + "I", 0)
    payload = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def _jpeg() -> bytes:
    ok, buf = cv2.imencode(".jpg", _pattern()[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return buf.tobytes()


def _reference(data: bytes) -> np.ndarray:
    """What OpenCV shows: it applies EXIF orientation itself."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return np.ascontiguousarray(bgr[:, :, ::-1])


def _mean_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("code", range(1, 9))
def test_the_tag_is_read(code: int, order: str) -> None:
    assert exif_orientation(_with_orientation(_jpeg(), code, order)) == code


def test_no_tag_or_a_broken_one_is_upright() -> None:
    plain = _jpeg()
    assert exif_orientation(plain) == 1
    broken = _with_orientation(plain, 6)
    cut = broken[:30] + b"\0" * 8 + broken[38:]  # the TIFF header zeroed
    assert exif_orientation(cut) == 1
    assert exif_orientation(b"\xff\xd8\xff\xe1\xff\xff") == 1  # a length past the end


@pytest.mark.parametrize("backend", ["simplejpeg", "opencv"])
@pytest.mark.parametrize("code", range(1, 9))
def test_every_backend_shows_what_opencv_shows(
    code: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    data = _with_orientation(_jpeg(), code)
    want = _reference(data)
    assert _mean_diff(decode_image(data), want) < 1.0
    # the reduced path: a target a third of the size, both ways round
    th, tw = want.shape[0] // 3, want.shape[1] // 3
    small = cv2.resize(want, (tw, th), interpolation=cv2.INTER_AREA)
    assert _mean_diff(decode_image(data, target_size=(tw, th)), small) < 3.0
    if code != 1:  # the tag matters: the stored pixels are not what is shown
        raw = decode_image(data, orientation="raw")
        assert raw.shape != want.shape or _mean_diff(raw, want) > 20


def test_raw_keeps_the_stored_pixels_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _with_orientation(_jpeg(), 6)
    stored = decode_image(_jpeg())
    assert _mean_diff(decode_image(data, orientation="raw"), stored) < 1.0
    monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    assert _mean_diff(decode_image(data, orientation="raw"), stored) < 1.0


@pytest.mark.parametrize("code", range(1, 9))
def test_orient_matches_the_exif_definition(code: int) -> None:
    """Where the stored top-left pixel goes, per the EXIF specification's table."""
    img = np.zeros((2, 3, 1), np.uint8)
    img[0, 0] = 1
    out = orient(img, code)
    corner = {
        1: (0, 0),
        2: (0, -1),
        3: (-1, -1),
        4: (-1, 0),
        5: (0, 0),
        6: (0, -1),
        7: (-1, -1),
        8: (-1, 0),
    }
    assert out.shape[:2] == ((3, 2) if code >= 5 else (2, 3))
    assert out[corner[code]][0] == 1
