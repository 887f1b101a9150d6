"""Build hook: the native archive reader (cffi, API mode) is compiled here.

The extension is optional: without a C compiler or zlib headers the install carries on
and ``cdml_edge.archive`` uses its pure-Python path (``native_available()`` is False).
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
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    @staticmethod
    def _skip(exc: BaseException) -> None:
        sys.stderr.write(
            f"warning: native archive core not built ({exc}); the pure-Python path is used\n"
        )


def _extensions() -> list:
    if os.environ.get("CDML_EDGE_BUILD_NATIVE", "1") == "0":
        return []
    try:
        sys.path.insert(0, os.path.join(HERE, "cdml_edge", "archive", "_native"))
        from cffi_build import make_builder  # type: ignore[import-not-found]

        ffi = make_builder()
        return [ffi.distutils_extension(tmpdir=os.path.join("build", "cffi"))]
    except Exception as exc:  # noqa: BLE001 - no cffi, no compiler: pure Python
        sys.stderr.write(f"warning: native archive core skipped ({exc})\n")
        return []
    finally:
        sys.path.pop(0)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
