"""cffi (API, out-of-line) build of the native area resize: ``cdml_edge.decode._native._area``.

Used by ``setup.py``; ``python cffi_area.py`` builds it in place. Without it,
:mod:`cdml_edge.decode.area` resizes with OpenCV's ``INTER_AREA`` (same results within 1 level).
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


def make_builder() -> FFI:
    ffi = FFI()
    with open(os.path.join(HERE, "area.h"), encoding="utf-8") as fh:
        header = fh.read()
    ffi.cdef(header.split("#include <stdint.h>", 1)[1].rsplit("#endif", 1)[0])
    ffi.set_source(
        "cdml_edge.decode._native._area",
        '#include "area.h"',
        sources=[os.path.relpath(os.path.join(HERE, "area.c"))],
        include_dirs=[HERE],
        libraries=["m"] if sys.platform != "win32" else [],
        depends=[os.path.relpath(os.path.join(HERE, "area.h"))],
        extra_compile_args=["-O3", "-std=c99"] if sys.platform != "win32" else [],
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
