"""EXIF orientation of JPEGs: read from the APP1 segment, applied the same way by every backend.

A camera or phone stores the sensor's pixels and an EXIF ``Orientation`` (1-8) that says how
to turn them for display. libjpeg-turbo (``simplejpeg``) ignores it, OpenCV applies it by
default: the same file gave two images. Every JPEG decode now reads the pixels as stored
(OpenCV with ``IMREAD_IGNORE_ORIENTATION``) and :func:`orient` turns them, so the result
does not depend on the backend or on the reduced-scale path.

``orientation="exif"`` (the default) applies the tag, as image viewers and OpenCV do;
``"raw"`` keeps the stored pixels, as PIL's ``Image.open`` and torchvision's ``decode_jpeg``
do by default.
"""

from __future__ import annotations

import struct
from typing import Literal

import numpy as np

from cdml_edge.decode.image_header import find_segment

Orientation = Literal["exif", "raw"]
ORIENTATIONS: tuple[str, ...] = ("exif", "raw")
_APP1, _SOS, _EOI = 0xE1, 0xDA, 0xD9
_EXIF = b"Exif\0\0"
_ORIENTATION_TAG = 0x0112
_MAX_APP1 = 16  # APP1 segments looked at for the EXIF one (real files: one or two)
_APP1_SCAN_END = frozenset({_APP1, _SOS, _EOI})


def check_orientation(value: str) -> Orientation:
    """``value`` if it is an orientation mode, else ``ValueError``."""
    if value not in ORIENTATIONS:
        raise ValueError(f"orientation must be one of {', '.join(ORIENTATIONS)}, got {value!r}")
    return value  # type: ignore[return-value]


def exif_orientation(data: bytes) -> int:
    """The EXIF ``Orientation`` (1-8) of a JPEG; 1 when there is none or it is unreadable.

    Its segments are walked as libjpeg walks them (:func:`~.image_header.find_segment`), up
    to :data:`_MAX_APP1` APP1 segments (XMP shares the marker).
    """
    start = 2
    for _ in range(_MAX_APP1):
        found = find_segment(data, _APP1_SCAN_END, start)
        if found is None or found[0] != _APP1 or found[2] < 2:
            return 1
        _, i, length = found
        if data[i + 4 : i + 10] == _EXIF:
            return _tiff_orientation(data[i + 10 : i + 2 + length])
        start = i + 2 + length
    return 1


def _tiff_orientation(tiff: bytes) -> int:
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    (ifd,) = struct.unpack_from(order + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    for k in range(min(count, (len(tiff) - ifd - 2) // 12)):
        tag, kind, _n = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * k)
        if tag == _ORIENTATION_TAG and kind in (3, 4):  # SHORT (the standard's) or LONG
            fmt = order + ("H" if kind == 3 else "I")  # stored in the entry itself either way
            (value,) = struct.unpack_from(fmt, tiff, ifd + 2 + 12 * k + 8)
            return value if 1 <= value <= 8 else 1
    return 1


def swaps_axes(code: int) -> bool:
    """Whether orientation ``code`` turns the image by 90 degrees (width and height swap)."""
    return code in (5, 6, 7, 8)


def orient(image: np.ndarray, code: int) -> np.ndarray:
    """The stored pixels ``image`` (H×W×C) turned as EXIF orientation ``code`` says."""
    if code == 2:
        return image[:, ::-1]
    if code == 3:
        return image[::-1, ::-1]
    if code == 4:
        return image[::-1]
    if code == 5:
        return image.transpose(1, 0, 2)
    if code == 6:
        return np.rot90(image, -1)
    if code == 7:
        return image[::-1, ::-1].transpose(1, 0, 2)
    if code == 8:
        return np.rot90(image, 1)
    return image
