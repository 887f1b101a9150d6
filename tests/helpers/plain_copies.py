"""Plain copies of a stock tar.zst written both ways (C core, Python path) and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zstandard

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import native_copy, reframe


class Served:
    """Counts the copies the C core served, the members it walked and the entries it skipped."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.copies = 0
        self.walked = 0
        self.skipped = 0
        real_copy, real_entries = native_copy.plain_copy, native_copy._entries
        real_index = native_copy._walked_index

        def copy(*a: Any, **kw: Any) -> Any:
            found = real_copy(*a, **kw)
            self.copies += found is not None
            return found

        def entries(walk: Any) -> Any:
            out = real_entries(walk)
            self.walked += len(out[0])
            self.skipped += len(out[1])
            return out

        def walked_index(walk: Any) -> Any:
            out = real_index(walk)
            self.walked += 0 if out is None else len(out)
            return out

        monkeypatch.setattr(native_copy, "plain_copy", copy)
        monkeypatch.setattr(native_copy, "_walked_index", walked_index)
        monkeypatch.setattr(native_copy, "_entries", entries)


def outcome(path: Path, out_path: Path, native: bool, **limits: Any) -> tuple[Any, ...]:
    """What write_plain_copy makes of ``path``: the index and the copy, or the error."""
    src = FileSource(path)
    saved = reframe.plain_copier
    if not native:
        reframe.plain_copier = lambda: None  # type: ignore[assignment]
    try:
        with open(out_path, "w+b") as out:
            try:
                found = reframe.write_plain_copy(src, src.size(), out, **limits)
            except (ArchiveError, OSError, EOFError, zstandard.ZstdError) as exc:
                return ("error", type(exc).__name__, str(exc))
            out.seek(0)
            data = out.read()
    finally:
        reframe.plain_copier = saved
        src.close()
    if found is False:
        return ("compressible",)
    ix = found.index  # type: ignore[union-attr]
    columns = (ix.names, ix.header_offsets, ix.data_offsets, ix.sizes, ix.mtimes)
    # the skipped entries in their order, as ``archive.skipped()`` lists them
    return ("copy", columns, ix.refused, ix.sparse, list(found.skipped.items()), data)  # type: ignore[union-attr]


def same_both_ways(path: Path, tmp: Path) -> tuple[Any, ...]:
    native = outcome(path, tmp / "native.tar", True)
    python = outcome(path, tmp / "python.tar", False)
    assert native == python
    return native


def opened(path: Path, native: bool, **limits: Any) -> tuple[Any, ...]:
    """What opening the tar.zst ``path`` finds (its one pass over the stream), or the error."""
    from cdml_edge.archive.tar import zst

    saved = zst.plain_copier
    if not native:
        zst.plain_copier = lambda: None  # type: ignore[assignment]
    src = FileSource(path)
    try:
        archive = zst.ZstdTarArchive.open(src, **limits)
    except (ArchiveError, OSError, EOFError, zstandard.ZstdError) as exc:
        src.close()  # the caller's source: refused, it is not the archive's to close
        return ("error", type(exc).__name__, str(exc))
    finally:
        zst.plain_copier = saved
    rows = archive._rows  # type: ignore[attr-defined]
    names = archive.names()
    archive.close()
    return ("open", rows, names)


def same_open_both_ways(path: Path) -> tuple[Any, ...]:
    """Open ``path`` with the C core's walk and with the Python walk; both must agree."""
    native, python = opened(path, True), opened(path, False)
    assert native == python
    return native


def c_core_copy(path: Path, out_path: Path) -> Any:
    """What the C core alone makes of ``path`` (``native_copy.plain_copy``; ``None``: declined)."""
    src = FileSource(path)
    try:
        with open(out_path, "w+b") as out:
            return native_copy.plain_copy(src, src.size(), out, reframe.PLAIN_MAX_RATIO)
    finally:
        src.close()
