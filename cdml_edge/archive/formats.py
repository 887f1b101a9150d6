"""The archive formats the package reads and writes, and the lookups over them.

A format is a folder (``zip/``, ``tar/``) whose ``__init__`` describes it with an
:class:`~cdml_edge.archive.spec.ArchiveFormat`; adding one is a new folder and one entry
in :data:`FORMATS`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from cdml_edge.archive.errors import UnsupportedArchiveError
from cdml_edge.archive.spec import ArchiveFormat, Probe, Writer
from cdml_edge.archive.tar import TAR, TAR_ZST
from cdml_edge.archive.zip import ZIP

#: every format; equal detection ranks are tried in this order
FORMATS: tuple[ArchiveFormat, ...] = (ZIP, TAR_ZST, TAR)

_TESTS = sorted(
    ((rank, k, test, fmt) for k, fmt in enumerate(FORMATS) for rank, test in fmt.tests),
    key=lambda t: (t[0], t[1]),
)


def detect(probe: Probe) -> ArchiveFormat:
    """The format of the probed bytes (the name is not looked at)."""
    for _, _, test, fmt in _TESTS:
        if test(probe):
            return fmt
    raise UnsupportedArchiveError(
        f"not a {_either(f.title for f in FORMATS)} archive", archive=probe.source.name
    )


def writer(name: str) -> Writer:
    """The writer of the format called ``name`` (or one of its aliases)."""
    for fmt in FORMATS:
        if fmt.write is not None and fmt.called(name):
            return fmt.write
    names = _either(f.name for f in FORMATS if f.write is not None)
    raise UnsupportedArchiveError(f"cannot write format {name!r} ({names})")


def for_path(path: str | os.PathLike[str]) -> ArchiveFormat:
    """The writable format a file name asks for, by its suffix."""
    p = os.fspath(path).lower()
    for fmt in FORMATS:
        if fmt.write is not None and fmt.suffixes and p.endswith(fmt.suffixes):
            return fmt
    raise UnsupportedArchiveError(f"cannot tell the format from the name {os.fspath(path)!r}")


def _either(names: Iterable[str]) -> str:
    """``"a, b or c"``."""
    *rest, last = list(names)
    return f"{', '.join(rest)} or {last}" if rest else str(last)
