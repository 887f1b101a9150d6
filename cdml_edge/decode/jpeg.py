"""JPEG decoding at a reduced scale with libjpeg-turbo (the ``simplejpeg`` wheels).

libjpeg-turbo decodes at any scale M/8 (M = 1..8) and skips most of the inverse-DCT work
of the pixels it drops; OpenCV exposes only 1/2, 1/4 and 1/8. :func:`decode_scaled` asks
for the smallest scale of :data:`SCALES` whose result is still at least :data:`OVERSAMPLE`
times the target on both axes (a 640x480 JPEG for a 64-px target decodes at 1/4, 160x120;
a 224-px one at full size), in RGB directly; the area shrink does the rest.

``simplejpeg`` is a default dependency where it ships wheels (x86-64 and aarch64 Linux,
macOS, Windows); where it is missing, or when ``CDML_EDGE_JPEG=opencv`` is set,
:func:`available` is False and images go through OpenCV. A JPEG that libjpeg-turbo refuses
in strict mode (a corrupt scan) returns ``None`` here, for OpenCV to decide.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from cdml_edge.optional import OptionalPart

SCALES = (1, 2, 4, 8)
"""The M of the M/8 scales used. 5/8 to 7/8 are left out by measurement: their inverse DCTs
have no SIMD code in libjpeg-turbo, so on 224-px JPEGs they decode slower than the full
8/8 (290-450 µs against 220 µs a JPEG). 3/8 is left out for its pixels: on real photos its
result, shrunk, differs from a full decode + area resize by up to 3.5 levels on average
(docs/dataset.md, "Image decoding")."""

OVERSAMPLE = 2
"""A scale is used only if it leaves at least twice the target on both axes: a scaled inverse
DCT is not an area average, and the shrink after it must do most of the averaging for the
result to stay within the tolerance on real photos (at 1x, 16 of 21 real photos missed it at
64 px: mean up to 3.5 levels)."""


def _load_simplejpeg() -> Any:
    import simplejpeg

    return simplejpeg


def _opencv_chosen() -> bool:
    return os.environ.get("CDML_EDGE_JPEG", "").lower() == "opencv"


_SIMPLEJPEG: OptionalPart[Any] = OptionalPart(_load_simplejpeg, _opencv_chosen)
_module = _SIMPLEJPEG.get


def available() -> bool:
    """True when JPEGs are decoded by libjpeg-turbo (``simplejpeg``), False for OpenCV."""
    return _module() is not None


def backend() -> str:
    """``"simplejpeg 1.9.0"`` or ``"opencv"``: who decodes JPEGs."""
    sj = _module()
    return f"simplejpeg {getattr(sj, '__version__', '?')}" if sj is not None else "opencv"


def scaled_size(width: int, height: int, target: tuple[int, int] | None) -> tuple[int, int]:
    """The size a JPEG of ``width × height`` decodes to for ``target`` ``(w, h)``.

    The smallest scale of :data:`SCALES` keeping both axes at least :data:`OVERSAMPLE` times
    the target (libjpeg rounds up).
    """
    if target is None:
        return width, height
    tw, th = target[0] * OVERSAMPLE, target[1] * OVERSAMPLE
    for m in SCALES:
        w, h = -(-width * m // 8), -(-height * m // 8)
        if w >= tw and h >= th:
            return w, h
    return width, height


def decode_scaled(
    data: bytes, size: tuple[int, int], target: tuple[int, int] | None
) -> np.ndarray | None:
    """RGB uint8 ``H×W×3`` of a JPEG of ``size`` ``(w, h)``, decoded by libjpeg-turbo.

    At :func:`scaled_size` for ``target`` (full size for ``None``); ``None`` when
    libjpeg-turbo is absent or refuses the data.
    """
    sj = _module()
    if sj is None:
        return None
    w, h = scaled_size(*size, target)
    if (w, h) == size:
        w = h = 0  # the full decode
    try:
        return sj.decode_jpeg(data, colorspace="RGB", min_width=w, min_height=h, strict=True)
    except Exception:  # ValueError on bad data, MemoryError: OpenCV decides and words it
        return None
