"""Thumbnails for the status page: made from the item bytes in memory, never from disk.

A thumbnail is made in the agent's own process when the page is read (on a thread of the
health endpoint's): only of an image whose header says it decodes within
``MAX_DECODE_BYTES`` and ``MAX_JPEG_SCANS``. A larger one (a 6000x6000 PNG is 216 MB
decoded; the pipeline decodes it for the model in a decoder process of its own) shows no
thumbnail.
"""

from __future__ import annotations

import cv2
import numpy as np

from cdml_edge.decode.image import decode_cost
from cdml_edge.decode.image_header import read_header

THUMB_SIDE = 96
JPEG_QUALITY = 70
MAX_DECODE_BYTES = 64 * 1024 * 1024
"""What one thumbnail's decode may allocate, as the image's header says: a 12-megapixel
progressive JPEG (35 MiB) or a 10-megapixel PNG fits; a baseline JPEG is decoded at 1/8."""
MAX_JPEG_SCANS = 32
"""Scans of a progressive JPEG (each one a pass over the image), as ``limits.max_jpeg_scans``."""


def affordable(data: bytes, side: int = THUMB_SIDE) -> bool:
    """Whether ``data``'s header names an image whose thumbnail costs at most the bounds."""
    header = read_header(data)
    if header is None or header.scans > MAX_JPEG_SCANS:
        return False
    return decode_cost(header, (side, side)) <= MAX_DECODE_BYTES


def thumbnail(data: bytes, side: int = THUMB_SIDE) -> bytes | None:
    """A JPEG of the image in ``data``, its longer side at most ``side`` pixels.

    ``None`` when ``data`` is not an image OpenCV can decode, or not :func:`affordable`. Big
    JPEGs are decoded at 1/4 or 1/8 of their size (libjpeg scales while decoding), so a
    thumbnail costs a fraction of a full decode.
    """
    if not affordable(data, side):
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    img = None
    for flag in (cv2.IMREAD_REDUCED_COLOR_8, cv2.IMREAD_REDUCED_COLOR_4):
        small = cv2.imdecode(buf, flag)
        if small is not None and min(small.shape[:2]) >= side // 2:
            img = small
            break
    if img is None:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if img is None:
        return None
    h, w = img.shape[:2]
    scale = side / max(h, w)
    if scale < 1:
        img = cv2.resize(
            img, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA
        )
    ok, out = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    return out.tobytes() if ok else None
