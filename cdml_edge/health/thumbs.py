"""Thumbnails for the status page: made from the item bytes in memory, never from disk."""

from __future__ import annotations

import cv2
import numpy as np

THUMB_SIDE = 96
JPEG_QUALITY = 70


def thumbnail(data: bytes, side: int = THUMB_SIDE) -> bytes | None:
    """A JPEG of the image in ``data``, its longer side at most ``side`` pixels.

    ``None`` when ``data`` is not an image OpenCV can decode. Big images are decoded at 1/4 or 1/8
    of their size (libjpeg scales while decoding), so a thumbnail costs a fraction of a
    full decode.
    """
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
