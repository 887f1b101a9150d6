"""cffi (API, out-of-line) build of the decoders' C helpers: ``cdml_edge.decode._native._area``.

The area resize, the JPEG scan count, the scaling of uint8 samples to float32 and the cells
of plain numeric CSVs. Used by ``setup.py``; ``python cffi_area.py`` builds it in place.
Without it, :mod:`cdml_edge.decode.area` resizes with OpenCV's ``INTER_AREA`` (same results
within 1 level), :mod:`cdml_edge.decode.image_header` counts scans with NumPy (the same
count), :mod:`cdml_edge.data.batch` scales with NumPy (the same values) and
:mod:`cdml_edge.decode.tabular` reads CSV cells with ``csv`` and NumPy (the same values).
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


HEADERS = ("area.h", "scans.h", "scale.h", "csvnum.h")
SOURCES = ("area.c", "scans.c", "scale.c", "csvnum.c")


def _declarations(name: str) -> str:
    """What a header declares, for ``cdef`` (after its includes, before its ``#endif``)."""
    with open(os.path.join(HERE, name), encoding="utf-8") as fh:
        header = fh.read()
    return header.split("#include <stdint.h>", 1)[1].rsplit("#endif", 1)[0]


def make_builder() -> FFI:
    ffi = FFI()
    ffi.cdef("".join(_declarations(h) for h in HEADERS))
    ffi.set_source(
        "cdml_edge.decode._native._area",
        "".join(f'#include "{h}"\n' for h in HEADERS),
        sources=[os.path.relpath(os.path.join(HERE, c)) for c in SOURCES],
        include_dirs=[HERE],
        libraries=["m"] if sys.platform != "win32" else [],
        depends=[os.path.relpath(os.path.join(HERE, h)) for h in HEADERS],
        extra_compile_args=["-O3", "-std=c99"] if sys.platform != "win32" else [],
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
