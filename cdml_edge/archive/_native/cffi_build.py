"""cffi (API, out-of-line) build of the native archive core: ``cdml_edge.archive._native._reader``.

Links zlib, and libzstd when ``zstd.h`` is found (``CZ_HAVE_ZSTD``: tar.zst frames and zstd
ZIP members decoded in C; without it they go through the ``zstandard`` package). The build
says which on stderr. Used by ``setup.py``; ``python cffi_build.py`` builds it in place.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


def _cdef() -> str:
    """The declarations cffi needs, taken from ``reader.h`` so the two cannot drift apart."""
    with open(os.path.join(HERE, "reader.h"), encoding="utf-8") as fh:
        header = fh.read()
    body = header.split("#include <stdint.h>", 1)[1]
    return body.rsplit("#endif", 1)[0]


def _zstd_include() -> str | None:
    candidates = [os.environ.get("ZSTD_INCLUDE_DIR", ""), sysconfig.get_config_var("INCLUDEDIR")]
    candidates += ["/usr/include", "/usr/local/include", "/opt/homebrew/include"]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "zstd.h")):
            return d
    return None


def _say(line: str) -> None:
    sys.stderr.write(f"cdml-edge native archive core: {line}\n")


def make_builder() -> FFI:
    ffi = FFI()
    ffi.cdef(_cdef())
    zstd_dir = _zstd_include()
    libraries = ["z"] + (["dl", "pthread"] if sys.platform.startswith("linux") else [])
    macros: list[tuple[str, str | None]] = []
    include_dirs = [HERE]
    library_dirs: list[str] = []
    if zstd_dir is not None and os.environ.get("CDML_EDGE_NO_LIBZSTD") != "1":
        libraries.append("zstd")
        macros.append(("CZ_HAVE_ZSTD", "1"))
        include_dirs.append(zstd_dir)
        if os.environ.get("ZSTD_LIB_DIR"):
            library_dirs.append(os.environ["ZSTD_LIB_DIR"])
        _say(f"zstd decoder: libzstd ({os.path.join(zstd_dir, 'zstd.h')})")
    else:
        why = "CDML_EDGE_NO_LIBZSTD=1" if zstd_dir else "no zstd.h (Debian: libzstd-dev)"
        _say(f"zstd decoder: the zstandard package, slower for tar.zst ({why})")
    ffi.set_source(
        "cdml_edge.archive._native._reader",
        '#include "reader.h"',
        sources=[os.path.relpath(os.path.join(HERE, f)) for f in ("reader.c", "frames.c")],
        include_dirs=include_dirs,
        libraries=libraries,
        library_dirs=library_dirs,
        define_macros=macros,
        depends=[os.path.relpath(os.path.join(HERE, f)) for f in ("reader.h", "internal.h")],
        extra_compile_args=["-O2", "-std=c99", "-D_XOPEN_SOURCE=700"]
        if sys.platform != "win32"
        else [],
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
