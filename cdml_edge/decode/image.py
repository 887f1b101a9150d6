"""Image bytes to uint8 H×W×3 RGB arrays, with reduced-size JPEG decoding.

JPEGs go through libjpeg-turbo at the smallest fast M/8 scale that covers the target
(:mod:`.jpeg`), other formats (and JPEGs it refuses) through OpenCV; shrinking is area
averaging (:mod:`.area`).
"""

from __future__ import annotations

import cv2
import numpy as np

from . import jpeg
from .area import shrink
from .errors import DecodeError

TargetSize = int | tuple[int, int] | None

DEFAULT_MAX_PIXELS = 40_000_000
"""Images with more pixels than this are refused before decoding (a 62 KB PNG can claim
8000×8000, 192 MB of RGB once decoded)."""

_PNG_SIG = b"\x89PNG\r\n\x1a\n"
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


def _png_size(data: bytes) -> tuple[int, int] | None:
    # the signature, then the IHDR chunk: length(4) "IHDR" width(4) height(4)
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _bmp_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 26:
        return None
    if int.from_bytes(data[14:18], "little") == 12:  # OS/2 BITMAPCOREHEADER
        return int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little")
    w = int.from_bytes(data[18:22], "little", signed=True)
    h = int.from_bytes(data[22:26], "little", signed=True)
    return abs(w), abs(h)  # a negative height means top-down rows


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30:
        return (
            int.from_bytes(data[26:28], "little") & 0x3FFF,
            int.from_bytes(data[28:30], "little") & 0x3FFF,
        )
    return None


def _pnm_size(data: bytes) -> tuple[int, int] | None:
    # "P6 <width> <height> ..." with whitespace and '#' comments between the fields
    fields: list[int] = []
    for line in data[2:256].split(b"\n"):
        for tok in line.split(b"#", 1)[0].split():
            if not tok.isdigit():
                return None
            fields.append(int(tok))
            if len(fields) == 2:
                return fields[0], fields[1]
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the header of a PNG, JPEG, BMP, WebP or PNM image, no decoding.

    ``None`` for other formats or an unreadable header.
    """
    if data.startswith(_PNG_SIG):
        return _png_size(data)
    if data.startswith(_JPEG_SOI):
        return jpeg_size(data)
    if data.startswith(b"BM"):
        return _bmp_size(data)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:1] == b"P" and data[1:2] in b"123456" and len(data) > 2:
        return _pnm_size(data)
    return None


def _check_pixels(member: str, w: int, h: int, max_pixels: int | None) -> None:
    if max_pixels is not None and w * h > max_pixels:
        raise DecodeError(
            member, f"image is {w}x{h} = {w * h} pixels, over the limit of {max_pixels}"
        )


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
    if target[0] < w and target[1] < h:
        return shrink(image, target)
    return cv2.resize(image, target, interpolation=cv2.INTER_LINEAR)


def _decode_opencv(
    buf: bytes, member: str, target: tuple[int, int] | None, reduced: bool, is_jpeg: bool
) -> np.ndarray:
    flag = _reduced_flag(buf, target) if (reduced and is_jpeg) else cv2.IMREAD_COLOR
    try:
        bgr = cv2.imdecode(np.frombuffer(buf, dtype=np.uint8), flag)
    except cv2.error as exc:
        raise DecodeError(member, f"OpenCV could not decode the image: {exc}") from exc
    except MemoryError as exc:
        raise DecodeError(member, "out of memory decoding the image") from exc
    if bgr is None or bgr.size == 0:
        raise DecodeError(member, "not a decodable image (corrupt or unsupported format)")
    if bgr.ndim == 2:
        return cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def decode_image(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    target_size: TargetSize = None,
    reduced: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> np.ndarray:
    """Decode an image to a contiguous uint8 ``H×W×3`` RGB array.

    An image of more than ``max_pixels`` pixels (``None``: no limit) raises ``DecodeError``:
    PNG, JPEG, BMP, WebP and PNM are measured from their header before any decoding, other
    formats (TIFF) right after it.

    ``target_size`` is an ``int`` (square) or ``(width, height)``. With ``reduced=True`` a
    JPEG larger than the target is decoded at a reduced scale by libjpeg-turbo itself: the
    smallest of 1/8, 1/4, 3/8 and 1/2 that keeps it at least the target size (OpenCV without
    ``simplejpeg``: 1/2, 1/4 or 1/8), then resized to the exact target. The result differs
    from a full decode + resize by a few levels (see the tolerance in docs/dataset.md).
    """
    buf = bytes(data) if not isinstance(data, bytes) else data
    if not buf:
        raise DecodeError(member, "empty image data")
    target = normalize_size(target_size)
    is_jpeg = buf.startswith(_JPEG_SOI)
    if is_jpeg and _is_truncated_jpeg(buf):
        raise DecodeError(member, "truncated JPEG (no end-of-image marker)")
    header = image_size(buf)
    if header is not None:
        _check_pixels(member, *header, max_pixels)
    rgb = None
    if is_jpeg and header is not None:
        rgb = jpeg.decode_scaled(buf, header, target if reduced else None)
    if rgb is None:
        rgb = _decode_opencv(buf, member, target, reduced, is_jpeg)
        if header is None:
            _check_pixels(member, rgb.shape[1], rgb.shape[0], max_pixels)
    if target is not None:
        rgb = resize(rgb, target)
    return np.ascontiguousarray(rgb)
