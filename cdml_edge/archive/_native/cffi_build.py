"""cffi (API, out-of-line) build of the native archive core: ``cdml_edge.archive._native._reader``.

Links zlib. The zstd decoder (tar.zst frames and zstd ZIP members decoded in C) is always
built: from the decompression sources of zstd bundled in ``zstd/`` (BSD licence, see
``zstd/LICENSE``), compiled into the extension, so neither ``libzstd-dev`` nor any other
system package is needed. ``CDML_EDGE_ZSTD=system`` links the system libzstd instead (when
``zstd.h`` is found: ``ZSTD_INCLUDE_DIR``, ``ZSTD_LIB_DIR``); ``CDML_EDGE_ZSTD=none`` (or
the older ``CDML_EDGE_NO_LIBZSTD=1``) leaves zstd to the ``zstandard`` package. The build
says which on stderr. Used by ``setup.py``; ``python cffi_build.py`` builds it in place.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED = os.path.join(HERE, "zstd")
#: the core's own sources
NATIVE_SOURCES = ("reader.c", "frames.c", "tarcopy.c")
#: the decompression half of zstd: what the reader calls, nothing of the compressor
BUNDLED_SOURCES = (
    "common/debug.c",
    "common/entropy_common.c",
    "common/error_private.c",
    "common/fse_decompress.c",
    "common/xxhash.c",
    "common/zstd_common.c",
    "decompress/huf_decompress.c",
    "decompress/zstd_ddict.c",
    "decompress/zstd_decompress.c",
    "decompress/zstd_decompress_block.c",
)
#: zstd's x86-64 Huffman loops (empty elsewhere); setup.py teaches setuptools the .S suffix
BUNDLED_ASM = "decompress/huf_decompress_amd64.S"
#: as zstd's own build: XXH64 under zstd's names, no legacy formats, no trace hooks
BUNDLED_MACROS: list[tuple[str, str | None]] = [
    ("XXH_NAMESPACE", "ZSTD_"),
    ("ZSTD_LEGACY_SUPPORT", "0"),
    ("ZSTD_TRACE", "0"),
    ("CZ_HAVE_ZSTD", "1"),
    ("CZ_ZSTD_BUNDLED", "1"),
]


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


def zstd_choice() -> str:
    """``"bundled"`` (the default), ``"system"`` or ``"none"``, from the environment."""
    if os.environ.get("CDML_EDGE_NO_LIBZSTD") == "1":
        return "none"
    choice = os.environ.get("CDML_EDGE_ZSTD", "bundled").strip().lower() or "bundled"
    if choice not in ("bundled", "system", "none"):
        raise ValueError(f"CDML_EDGE_ZSTD={choice!r}: expected bundled, system or none")
    return choice


def _zstd_build(
    asm: bool,
) -> tuple[list[str], list[str], list[str], list[tuple[str, str | None]], list[str]]:
    """``(sources, include_dirs, libraries, macros, library_dirs)`` of the zstd decoder.

    ``asm``: assemble zstd's x86-64 Huffman loops (else its portable C loops, a little slower).
    """
    choice = zstd_choice()
    if choice == "system":
        found = _zstd_include()
        if found is not None:
            _say(f"zstd decoder: the system libzstd ({os.path.join(found, 'zstd.h')})")
            lib_dirs = [os.environ["ZSTD_LIB_DIR"]] if os.environ.get("ZSTD_LIB_DIR") else []
            return [], [found], ["zstd"], [("CZ_HAVE_ZSTD", "1")], lib_dirs
        _say("zstd decoder: no system zstd.h, the bundled sources are used")
        choice = "bundled"
    if choice == "none":
        _say("zstd decoder: the zstandard package, slower for tar.zst (CDML_EDGE_ZSTD=none)")
        return [], [], [], [], []
    _say("zstd decoder: libzstd from the bundled sources (zstd/)")
    files = [*BUNDLED_SOURCES, BUNDLED_ASM] if asm else list(BUNDLED_SOURCES)
    macros = BUNDLED_MACROS + ([] if asm else [("ZSTD_DISABLE_ASM", "1")])
    sources = [os.path.relpath(os.path.join(BUNDLED, f)) for f in files]
    return sources, [BUNDLED], [], macros, []


def make_builder(asm: bool = sys.platform != "win32") -> FFI:
    """The cffi builder; ``asm``: the build compiles ``.S`` files (setup.py's does)."""
    ffi = FFI()
    ffi.cdef(_cdef())
    zsrc, zinc, zlibs, macros, library_dirs = _zstd_build(asm)
    libraries = ["z", *zlibs] + (["dl", "pthread"] if sys.platform.startswith("linux") else [])
    ffi.set_source(
        "cdml_edge.archive._native._reader",
        '#include "reader.h"',
        sources=[os.path.relpath(os.path.join(HERE, f)) for f in NATIVE_SOURCES] + zsrc,
        include_dirs=[HERE, *zinc],
        libraries=libraries,
        library_dirs=library_dirs,
        define_macros=macros,
        depends=[os.path.relpath(os.path.join(HERE, f)) for f in ("reader.h", "internal.h")],
        extra_compile_args=["-O3" if zsrc else "-O2", "-std=c99", "-D_XOPEN_SOURCE=700"]
        if sys.platform != "win32"
        else [],
    )
    return ffi


if __name__ == "__main__":  # cffi's own compile knows no .S files
    make_builder(asm=False).compile(verbose=True)
