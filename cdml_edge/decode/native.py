"""The decoders' C helpers (``cdml_edge.decode._native._area``), or ``None``.

Built by ``setup.py`` where a C compiler is present: the area resize (:mod:`.area`) and the
JPEG scan count (:mod:`.image_header`). ``CDML_EDGE_NATIVE=0`` forces the Python paths
(OpenCV, NumPy), which give the same results.
"""

from __future__ import annotations

import os
from typing import Any

_loaded: tuple[Any, Any] | None = None
_tried = False


def helpers() -> tuple[Any, Any] | None:
    """``(ffi, lib)`` of the built helpers; ``None`` when not built or disabled."""
    global _loaded, _tried
    if os.environ.get("CDML_EDGE_NATIVE", "1") == "0":
        return None
    if not _tried:
        _tried = True
        try:
            from cdml_edge.decode._native._area import ffi, lib

            _loaded = (ffi, lib)
        except ImportError:
            _loaded = None
    return _loaded
