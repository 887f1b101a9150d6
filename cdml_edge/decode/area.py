"""Area (box-filter) downscaling of uint8 images: the C core when built, else OpenCV.

Both give OpenCV's ``INTER_AREA`` result, to within one level (float rounding). OpenCV's
own area filter is fast only for integer ratios; at the ratios a scaled JPEG decode leaves
(140 -> 128 px) it costs more than the decode, where the C core costs about a quarter of
it; integer ratios stay with OpenCV. The C call releases the GIL. ``CDML_EDGE_NATIVE=0``
forces OpenCV.
"""

from __future__ import annotations

import cv2
import numpy as np

from cdml_edge.decode.native import helpers


def area_backend() -> str:
    """``"native"`` (the C core) or ``"opencv"``: who shrinks images."""
    return "native" if helpers() is not None else "opencv"


def shrink(image: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """``image`` (uint8 ``H×W×C`` or ``H×W``) shrunk to ``(width, height)`` by area averaging.

    The target must not be larger than the image on either axis.
    """
    h, w = image.shape[:2]
    tw, th = target
    if tw > w or th > h:
        raise ValueError(f"shrink: target {target} is larger than the image {w}x{h}")
    native = helpers()
    exact = w % tw == 0 and h % th == 0  # OpenCV's fast path: whole blocks of pixels
    if native is None or exact or image.dtype != np.uint8 or image.ndim not in (2, 3):
        return cv2.resize(image, target, interpolation=cv2.INTER_AREA)
    src = np.ascontiguousarray(image)
    ch = 1 if src.ndim == 2 else src.shape[2]
    out = np.empty((th, tw, ch)[: src.ndim], np.uint8)
    ffi, lib = native
    dst = ffi.from_buffer(out, require_writable=True)
    rc = lib.cdml_area_resize(ffi.from_buffer(src), w, h, w * ch, ch, dst, tw, th)
    if rc == 2:
        raise MemoryError("out of memory shrinking an image")
    return out
