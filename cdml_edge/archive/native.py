"""Loader of the C core (``cdml_edge.archive._native._reader``), with the Python fallback.

``CDML_EDGE_NATIVE=0`` forces the pure-Python path. ZIP members are read by the C core
whenever it is built; tar.zst frames too, by the libzstd compiled into it (bundled sources,
or the system's with ``CDML_EDGE_ZSTD=system``; none with ``CDML_EDGE_ZSTD=none``).
"""

from __future__ import annotations

from typing import Any

from cdml_edge.optional import OptionalPart, native_off


def _load() -> Any:
    from cdml_edge.archive.zip import native as _zipnative

    return _zipnative if _zipnative.available() else None


_CORE: OptionalPart[Any] = OptionalPart(_load, native_off)


def module() -> Any:
    """The native ZIP binding, or ``None`` when it is not built or disabled."""
    return _CORE.get()


def frame_decoder() -> Any:
    """The C core's tar.zst frame decoder (:mod:`cdml_edge.archive.tar.native`), or ``None``.

    ``None`` when the core is not built, is disabled, or was built without libzstd.
    """
    if module() is None:
        return None
    from cdml_edge.archive.tar import native as _tarnative

    return _tarnative if _tarnative.available() else None


def native_available() -> bool:
    """True when the C core is built and enabled (``CDML_EDGE_NATIVE`` is not ``0``)."""
    return module() is not None


def backends() -> dict[str, str]:
    """What the C core decodes with: ``{"inflate": ..., "zstd": ...}``; ``{}`` without it.

    ``inflate``: ``"libdeflate"`` (loaded at run time) or ``"zlib"`` (about half the speed);
    ``zstd``: ``"libzstd 1.5.6 (bundled)"``, ``"libzstd 1.5.4 (system)"``, or
    ``"zstandard package"`` when the core has no zstd decoder (tar.zst frames go through
    Python, slower).
    """
    mod = module()
    if mod is None:
        return {}
    if mod.have_zstd():
        zstd = f"libzstd {mod.zstd_version()} ({'bundled' if mod.zstd_bundled() else 'system'})"
    else:
        zstd = "zstandard package"
    return {"inflate": mod.inflate_backend(), "zstd": zstd}


def describe() -> str:
    """One line on the active reader, ``python`` or ``native (...)`` with its backends.

    ``native (inflate: libdeflate, zstd: libzstd 1.5.6 (bundled))``.
    """
    found = backends()
    if not found:
        return "python"
    return f"native (inflate: {found['inflate']}, zstd: {found['zstd']})"


def plain_copier() -> Any:
    """The C core's plain copy of a stock tar.zst (:mod:`~.tar.native_copy`), or ``None``.

    ``None`` when the core is not built, is disabled, or was built without libzstd.
    """
    if frame_decoder() is None:
        return None
    from cdml_edge.archive.tar import native_copy

    return native_copy
