"""Image bytes to uint8 H×W×3 RGB arrays, with reduced-size JPEG decoding.

Each image's header is read first (:mod:`.image_header`) and what it claims checked
against the decode limits (:mod:`.limits`) before a pixel is decoded. JPEGs go through
libjpeg-turbo at the smallest fast M/8 scale that covers the target (:mod:`.jpeg`), other
formats (and JPEGs it refuses) through OpenCV; shrinking is area averaging (:mod:`.area`).
"""

from __future__ import annotations

import cv2
import numpy as np

from . import jpeg
from .area import shrink
from .errors import DecodeError
from .image_header import JPEG_SOI, ImageHeader, jpeg_header, read_header
from .isolation import run_decode
from .limits import DecodeLimits, charged, current_limits
from .orientation import Orientation, check_orientation, exif_orientation, orient, swaps_axes

JPEG_EOI = b"\xff\xd9"

TargetSize = int | tuple[int, int] | None

DEFAULT_MAX_PIXELS = DecodeLimits().max_pixels
"""Images with more pixels than this are refused before decoding (a 62 KB PNG can claim
8000×8000, 192 MB of RGB once decoded)."""

_REDUCED = (
    (8, cv2.IMREAD_REDUCED_COLOR_8),
    (4, cv2.IMREAD_REDUCED_COLOR_4),
    (2, cv2.IMREAD_REDUCED_COLOR_2),
)
_REDUCED_FLAGS = dict(_REDUCED)
FROM_LIMITS = -1
"""``max_pixels`` default: the ``max_pixels`` of the limits in use."""


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
    header = jpeg_header(data)
    return None if header is None else (header.width, header.height)


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the header of a JPEG, PNG, BMP, WebP, PNM or TIFF image.

    No decoding; ``None`` for other formats or an unreadable header.
    """
    header = read_header(data)
    return None if header is None else (header.width, header.height)


def _check_pixels(member: str, w: int, h: int, max_pixels: int | None) -> None:
    if max_pixels is not None and w * h > max_pixels:
        raise DecodeError(
            member, f"image is {w}x{h} = {w * h} pixels, over the limit of {max_pixels}"
        )


def _check_header(
    member: str, header: ImageHeader, target: tuple[int, int] | None, limits: DecodeLimits
) -> int:
    """Refuse what the header claims beyond ``limits`` (pixels checked by the caller).

    Returns the bytes the decode will allocate.
    """
    if header.format == "jpeg":
        limits.check(member, "JPEG scan count", header.scans, limits.max_jpeg_scans, "scans")
    cost = decode_cost(header, target)
    limits.check_bytes(
        member, f"decoding this {header.width}x{header.height} {header.format}", cost
    )
    return cost


def decode_cost(header: ImageHeader, target: tuple[int, int] | None = None) -> int:
    """Bytes a decode of ``header`` allocates, at the reduced scale a JPEG gets for ``target``.

    The decoder's buffer (channels x sample bytes per pixel), the RGB copy and, for a
    progressive JPEG, its whole-image coefficient buffer, for a TIFF its tile or strip buffer.
    """
    w, h = header.width, header.height
    if header.format == "jpeg" and target is not None:
        sw, sh = jpeg.scaled_size(w, h, target)
        factor = _reduced_factor(w, h, target)
        w, h = max(sw, -(-w // factor)), max(sh, -(-h // factor))  # either decoder's scale
    sample = -(-header.bits // 8)
    buffers = header.coefficient_bytes + header.buffer_bytes
    return w * h * (max(header.channels, 3) * sample + 3) + buffers


def _is_truncated_jpeg(data: bytes) -> bool:
    # 0xFF is byte-stuffed inside entropy-coded data, so FF D9 only appears as the EOI
    # marker; allow trailing padding some cameras append after it.
    return data.rfind(JPEG_EOI, max(0, len(data) - 4096)) == -1


def _reduced_factor(w: int, h: int, target: tuple[int, int]) -> int:
    """OpenCV's reduced scale (8, 4, 2 or 1) of a ``w x h`` JPEG for ``target``.

    It only reduces while the decoded image stays at least :data:`jpeg.OVERSAMPLE` times the
    target.
    """
    tw, th = target[0] * jpeg.OVERSAMPLE, target[1] * jpeg.OVERSAMPLE
    for factor, _ in _REDUCED:
        if w // factor >= tw and h // factor >= th:
            return factor
    return 1


def _reduced_flag(header: ImageHeader, target: tuple[int, int] | None) -> int:
    """OpenCV's read flag for a JPEG of ``header``: reduced for ``target`` when it can be."""
    if target is None:
        return cv2.IMREAD_COLOR
    factor = _reduced_factor(header.width, header.height, target)
    return int(_REDUCED_FLAGS.get(factor, cv2.IMREAD_COLOR))


def resize(image: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """Resize to ``(width, height)``: area filter when shrinking, bilinear when growing."""
    h, w = image.shape[:2]
    if (w, h) == target:
        return image
    if target[0] < w and target[1] < h:
        return shrink(image, target)
    return cv2.resize(image, target, interpolation=cv2.INTER_LINEAR)


def _decode_opencv(
    buf: bytes, member: str, header: ImageHeader, target: tuple[int, int] | None, reduced: bool
) -> np.ndarray:
    """The stored pixels, RGB: OpenCV's own EXIF rotation is off (:mod:`.orientation`)."""
    is_jpeg = header.format == "jpeg"
    flag = _reduced_flag(header, target) if (reduced and is_jpeg) else cv2.IMREAD_COLOR
    flag |= cv2.IMREAD_IGNORE_ORIENTATION
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
    max_pixels: int | None = FROM_LIMITS,
    limits: DecodeLimits | None = None,
    orientation: Orientation = "exif",
) -> np.ndarray:
    """Decode an image to a contiguous uint8 ``H×W×3`` RGB array.

    Only JPEG, PNG, BMP, WebP, PNM and TIFF are decoded, recognised by their bytes whatever
    the extension. Their header is read first and the image refused (``DecodeError``) when
    it claims more than ``limits`` allow (default: :func:`~.limits.current_limits`): pixels,
    JPEG scans, or bytes the decode would allocate. ``max_pixels`` overrides the limits'
    pixel bound (``None``: no pixel limit).

    ``target_size`` is an ``int`` (square) or ``(width, height)``. With ``reduced=True`` a
    JPEG at least twice the target is decoded at a reduced scale by libjpeg-turbo itself: the
    smallest of 1/8, 1/4 and 1/2 that keeps it at least twice the target size (OpenCV
    without ``simplejpeg``: the same scales), then area-resized to the exact target. The
    result differs from a full decode + resize by a few levels (see the tolerance in
    docs/dataset.md).

    ``orientation="exif"`` turns a JPEG as its EXIF ``Orientation`` says (as viewers and
    OpenCV show it); ``"raw"`` keeps the pixels as stored (as PIL and torchvision read
    them). Every backend gives the same image either way.
    """
    buf = bytes(data) if not isinstance(data, bytes) else data
    if not buf:
        raise DecodeError(member, "empty image data")
    lim = limits or current_limits()
    target = normalize_size(target_size)
    is_jpeg = buf.startswith(JPEG_SOI)
    if is_jpeg and _is_truncated_jpeg(buf):
        raise DecodeError(member, "truncated JPEG (no end-of-image marker)")
    header = read_header(buf)
    if header is None:
        raise DecodeError(
            member,
            "not a decodable image (unsupported format or unreadable header: JPEG, PNG, BMP, "
            "WebP, PNM and TIFF are decoded)",
        )
    _check_pixels(
        member,
        header.width,
        header.height,
        lim.max_pixels if max_pixels == FROM_LIMITS else max_pixels,
    )
    cost = _check_header(member, header, target if reduced else None, lim)
    code = exif_orientation(buf) if is_jpeg and check_orientation(orientation) == "exif" else 1
    stored = target  # the target in stored pixels: a quarter turn swaps its axes
    if target is not None and swaps_axes(code):
        stored = (target[1], target[0])
    with charged(cost):
        args = (buf, member, header, stored, reduced, code, target)
        return run_decode(_pixels, args, member=member, limits=lim, cost=cost)


def _pixels(
    buf: bytes,
    member: str,
    header: ImageHeader,
    stored: tuple[int, int] | None,
    reduced: bool,
    code: int,
    target: tuple[int, int] | None,
) -> np.ndarray:
    """The decode itself (in this process or a decoder process: :mod:`.isolation`)."""
    rgb = orient(_stored_pixels(buf, member, header, stored, reduced), code)
    if target is not None:
        rgb = resize(rgb, target)
    return np.ascontiguousarray(rgb)


def _stored_pixels(
    buf: bytes, member: str, header: ImageHeader, target: tuple[int, int] | None, reduced: bool
) -> np.ndarray:
    """The pixels as stored, RGB: libjpeg-turbo for a JPEG it takes, else OpenCV."""
    if header.format == "jpeg":
        size = (header.width, header.height)
        rgb = jpeg.decode_scaled(buf, size, target if reduced else None)
        if rgb is not None:
            return rgb
    return _decode_opencv(buf, member, header, target, reduced)
