"""cffi (API, out-of-line) build of the native archive core: ``cdml_edge.archive._native._reader``.

Links zlib, and libzstd when ``zstd.h`` is found (``CZ_HAVE_ZSTD``). Used by ``setup.py``;
``python cffi_build.py`` builds it in place.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

CDEF = """
typedef struct {
    uint64_t offset; uint64_t csize; uint64_t usize; int64_t ut_mtime;
    uint32_t crc; uint32_t name_off; uint32_t name_len; uint32_t hdr_extra; uint32_t cd_off;
    uint16_t method; uint16_t flags; uint16_t dtime; uint16_t ddate;
    uint8_t name_kind; uint8_t is_dir;
} cz_entry;
typedef struct {
    cz_entry *entries; size_t count; char *names; size_t names_len; size_t ndirs;
    int special_names;
} cz_index;
int cz_have_zstd(void);
int cz_inflate_backend(void);
int cz_parse(const uint8_t *cd, size_t len, int64_t delta, cz_index **out,
             char *err, size_t errlen);
void cz_free(cz_index *idx);
int cz_read_fd(const cz_index *idx, int fd, uint64_t file_size, const uint32_t *ids,
               size_t n, uint8_t *const *outs,
               int32_t *status, uint64_t *aux);
int cz_read_one_fd(const cz_index *idx, int fd, uint64_t file_size, uint32_t id,
                   uint8_t *out);
int cz_read_one_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len, uint32_t id,
                    uint8_t *out);
int cz_read_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len,
                const uint32_t *ids, size_t n, uint8_t *const *outs,
               int32_t *status, uint64_t *aux);
int cz_read_bufs(const cz_index *idx, const uint8_t *const *bufs, const uint64_t *lens,
                 const uint32_t *ids, size_t n, uint8_t *const *outs,
               int32_t *status, uint64_t *aux);
"""


def _zstd_include() -> str | None:
    candidates = [os.environ.get("ZSTD_INCLUDE_DIR", ""), sysconfig.get_config_var("INCLUDEDIR")]
    candidates += ["/usr/include", "/usr/local/include", "/opt/homebrew/include"]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "zstd.h")):
            return d
    return None


def make_builder() -> FFI:
    ffi = FFI()
    ffi.cdef(CDEF)
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
    ffi.set_source(
        "cdml_edge.archive._native._reader",
        '#include "reader.h"',
        sources=[os.path.relpath(os.path.join(HERE, "reader.c"))],
        include_dirs=include_dirs,
        libraries=libraries,
        library_dirs=library_dirs,
        define_macros=macros,
        extra_compile_args=["-O2", "-std=c99", "-D_XOPEN_SOURCE=700"]
        if sys.platform != "win32"
        else [],
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
