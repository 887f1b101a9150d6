"""The decoders' C helpers (``cdml_edge.decode._native._area``), or ``None``.

Built by ``setup.py`` where a C compiler is present: the area resize (:mod:`.area`), the
JPEG scan count (:mod:`.image_header`), the scaling of uint8 samples to float32 in [0, 1]
(:mod:`cdml_edge.data.batch`) and the cells of plain numeric CSVs (:mod:`.tabular`).
``CDML_EDGE_NATIVE=0`` forces the Python paths (OpenCV, NumPy, ``csv``), which give the same
results.
"""

from __future__ import annotations

import logging
from typing import Any

from cdml_edge.optional import OptionalPart, native_off

log = logging.getLogger(__name__)


FUNCTIONS = (
    "cdml_area_resize",
    "cdml_count_scans",
    "cdml_scale_to_unit",
    "cdml_csv_numbers",
)
"""What the helpers export; a build lacking one predates its sources and is not used."""


def _load() -> tuple[Any, Any]:
    from cdml_edge.decode._native._area import ffi, lib

    missing = [name for name in FUNCTIONS if not hasattr(lib, name)]
    if missing:
        log.warning(
            "the decoders' C helpers were built from older sources (no %s): using the Python "
            "paths; reinstall (make install-dev, or pip install -e .) to rebuild them",
            ", ".join(missing),
        )
        raise ImportError(f"stale build of cdml_edge.decode._native._area: no {missing}")
    return ffi, lib


_HELPERS: OptionalPart[tuple[Any, Any]] = OptionalPart(_load, native_off)


def helpers() -> tuple[Any, Any] | None:
    """``(ffi, lib)`` of the built helpers; ``None`` when not built or disabled."""
    return _HELPERS.get()
