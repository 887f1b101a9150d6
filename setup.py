"""Build hook: the native archive reader and the decoders' C helpers (cffi, API mode).

The archive core carries its zstd decoder (zstd's sources, bundled): no system zstd is
needed. The extensions are optional: without a C compiler or zlib headers the install carries on
and ``cdml_edge.archive`` uses its pure-Python path (``native_available()`` is False),
``cdml_edge.decode`` OpenCV's area resize and NumPy's scan count.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the native core cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure falls back to Python
            self._skip(exc)

    def build_extension(self, ext):  # type: ignore[no-untyped-def]
        if ".S" not in self.compiler.src_extensions:  # the bundled zstd's assembly
            self.compiler.src_extensions.append(".S")
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    @staticmethod
    def _skip(exc: BaseException) -> None:
        sys.stderr.write(
            f"warning: native archive core not built ({exc}); the pure-Python path is used\n"
        )


# (folder, build module): the archive core, then the area resize of image decoding
NATIVE = (
    (os.path.join("cdml_edge", "archive", "_native"), "cffi_build"),
    (os.path.join("cdml_edge", "decode", "_native"), "cffi_area"),
)


def _extensions() -> list:
    if os.environ.get("CDML_EDGE_BUILD_NATIVE", "1") == "0":
        return []
    out = []
    for folder, module in NATIVE:
        sys.path.insert(0, os.path.join(HERE, folder))
        try:
            ffi = __import__(module).make_builder()
            out.append(ffi.distutils_extension(tmpdir=os.path.join("build", "cffi")))
        except Exception as exc:  # noqa: BLE001 - no cffi, no compiler: pure Python
            sys.stderr.write(f"warning: native {module} skipped ({exc})\n")
        finally:
            sys.path.pop(0)
    return out


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
