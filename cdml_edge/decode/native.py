"""The decoders' C helpers (``cdml_edge.decode._native._area``), or ``None``.

Built by ``setup.py`` where a C compiler is present: the area resize (:mod:`.area`), the
JPEG scan count (:mod:`.image_header`) and the scaling of uint8 samples to float32 in [0, 1]
(:mod:`cdml_edge.data.batch`). ``CDML_EDGE_NATIVE=0`` forces the Python paths (OpenCV,
NumPy), which give the same results.
"""

from __future__ import annotations

from typing import Any

from cdml_edge.optional import OptionalPart, native_off


def _load() -> tuple[Any, Any]:
    from cdml_edge.decode._native._area import ffi, lib

    return ffi, lib


_HELPERS: OptionalPart[tuple[Any, Any]] = OptionalPart(_load, native_off)


def helpers() -> tuple[Any, Any] | None:
    """``(ffi, lib)`` of the built helpers; ``None`` when not built or disabled."""
    return _HELPERS.get()
