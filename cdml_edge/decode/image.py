"""Image bytes to uint8 H×W×3 RGB arrays (OpenCV), with reduced-size JPEG decoding."""

from __future__ import annotations

import cv2
import numpy as np

from .errors import DecodeError

TargetSize = int | tuple[int, int] | None

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
# SOF0..SOF15 carry the frame size, except DHT (C4), JPG (C8) and DAC (CC)
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_REDUCED = (
    (8, cv2.IMREAD_REDUCED_COLOR_8),
    (4, cv2.IMREAD_REDUCED_COLOR_4),
    (2, cv2.IMREAD_REDUCED_COLOR_2),
)


def normalize_size(target_size: TargetSize) -> tuple[int, int] | None:
    """``None`` | ``int`` (a square) | ``(width, height)`` -> ``(width, height)`` or ``None``."""
    if target_size is None:
        return None
    if isinstance(target_size, int):
        w = h = target_size
    else:
        w, h = (int(v) for v in target_size)
    if w <= 0 or h <= 0:
        raise ValueError(f"target_size must be positive, got {target_size!r}")
    return (w, h)


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a JPEG frame header, or ``None`` if it cannot be found."""
    if not data.startswith(_JPEG_SOI):
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _SOF_MARKERS:
            if i + 9 > n:
                return None
            h = int.from_bytes(data[i + 5 : i + 7], "big")
            w = int.from_bytes(data[i + 7 : i + 9], "big")
            return (w, h) if w and h else None
        if marker == 0xDA or length < 2:  # start of scan before any frame header
            return None
        i += 2 + length
    return None


def _is_truncated_jpeg(data: bytes) -> bool:
    # 0xFF is byte-stuffed inside entropy-coded data, so FF D9 only appears as the EOI
    # marker; allow trailing padding some cameras append after it.
    return data.rfind(_JPEG_EOI, max(0, len(data) - 4096)) == -1


def _reduced_flag(data: bytes, target: tuple[int, int] | None) -> int:
    if target is None:
        return cv2.IMREAD_COLOR
    size = jpeg_size(data)
    if size is None:
        return cv2.IMREAD_COLOR
    w, h = size
    tw, th = target
    for factor, flag in _REDUCED:
        # only shrink while the decoded image stays at least as large as the target
        if w // factor >= tw and h // factor >= th:
            return int(flag)
    return cv2.IMREAD_COLOR


def resize(image: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """Resize to ``(width, height)``: area filter when shrinking, bilinear when growing."""
    h, w = image.shape[:2]
    if (w, h) == target:
        return image
    shrink = target[0] < w and target[1] < h
    interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    return cv2.resize(image, target, interpolation=interp)


def decode_image(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    target_size: TargetSize = None,
    reduced: bool = True,
) -> np.ndarray:
    """Decode an image to a contiguous uint8 ``H×W×3`` RGB array.

    ``target_size`` is an ``int`` (square) or ``(width, height)``. With ``reduced=True`` a
    JPEG much larger than the target is decoded at 1/2, 1/4 or 1/8 scale by libjpeg itself
    (``cv2.IMREAD_REDUCED_COLOR_*``), then resized to the exact target.
    """
    buf = bytes(data) if not isinstance(data, bytes) else data
    if not buf:
        raise DecodeError(member, "empty image data")
    target = normalize_size(target_size)
    is_jpeg = buf.startswith(_JPEG_SOI)
    if is_jpeg and _is_truncated_jpeg(buf):
        raise DecodeError(member, "truncated JPEG (no end-of-image marker)")
    flag = _reduced_flag(buf, target) if (reduced and is_jpeg) else cv2.IMREAD_COLOR
    try:
        bgr = cv2.imdecode(np.frombuffer(buf, dtype=np.uint8), flag)
    except cv2.error as exc:
        raise DecodeError(member, f"OpenCV could not decode the image: {exc}") from exc
    if bgr is None or bgr.size == 0:
        raise DecodeError(member, "not a decodable image (corrupt or unsupported format)")
    if bgr.ndim == 2:
        bgr = cv2.cvtColor(bgr, cv2.COLOR_GRAY2BGR)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if target is not None:
        rgb = resize(rgb, target)
    return np.ascontiguousarray(rgb)
