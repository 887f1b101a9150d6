"""Small JPEGs with an EXIF orientation, and what OpenCV shows of them (it applies the tag)."""

from __future__ import annotations

import struct

import cv2
import numpy as np

W, H = 96, 64  # not square, so a quarter turn shows


def pattern() -> np.ndarray:
    """An RGB image no flip or turn maps onto itself: gradients and a corner block."""
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([x * 255 // W, y * 255 // H, (x + 2 * y) % 256], axis=-1).astype(np.uint8)
    img[:16, :24] = (250, 20, 20)
    return img


def with_orientation(jpeg: bytes, code: int, order: str = ">", long: bool = False) -> bytes:
    """``jpeg`` with an EXIF APP1 segment holding ``Orientation = code`` after its SOI.

    As a SHORT, as the standard says, or (``long``) as a LONG, as some writers store it.
    """
    magic = b"MM\0*" if order == ">" else b"II*\0"
    if long:
        entry = struct.pack(order + "HHII", 0x0112, 4, 1, code)
    else:
        entry = struct.pack(order + "HHIHH", 0x0112, 3, 1, code, 0)
    tiff = magic + struct.pack(order + "I", 8) + struct.pack(order + "H", 1) + entry
    tiff += struct.pack(order + "I", 0)
    payload = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def jpeg() -> bytes:
    """A 96 x 64 JPEG of :func:`pattern` (q95), no EXIF."""
    ok, buf = cv2.imencode(".jpg", pattern()[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return buf.tobytes()


def opencv_shows(data: bytes) -> np.ndarray:
    """What OpenCV shows: it applies EXIF orientation itself."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return np.ascontiguousarray(bgr[:, :, ::-1])


def mean_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two images of the same shape, in levels."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())
