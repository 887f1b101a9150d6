"""What in a retention folder the ring will not trust: reported by ``doctor``, never acted on.

:func:`untrusted_entries` lists, read-only, the catalog rows that point outside the ring,
ring-named entries (and catalog files) that are links, FIFOs or devices, and a ``corrupt/``
that is not a real folder. The agent ignores each of them (and logs it); the doctor shows
them so they can be cleaned up by hand.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from cdml_edge.store.catalog import CATALOG_NAME, Catalog, special_catalog_files
from cdml_edge.store.ondisk import kind_of
from cdml_edge.store.sidecar import CORRUPT_DIR, ring_name, safe_record


def untrusted_entries(directory: str | Path) -> list[str]:
    """One line per entry of the ring at ``directory`` that the ring ignores as untrusted."""
    d = Path(directory)
    special = special_catalog_files(d)
    out = [f"{name}: {kind}, never opened" for name, kind in special.items()]
    if not special:
        out += _outside_rows(d)
    for name in sorted(os.listdir(d)):
        if ring_name(name) is None:
            continue
        try:
            mode = os.lstat(d / name).st_mode
        except OSError:  # gone meanwhile (a live agent evicted it)
            continue
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # a folder: foreign
            out.append(f"{ascii(name)}: {kind_of(mode)}, never opened")
    try:
        mode = os.lstat(d / CORRUPT_DIR).st_mode
    except FileNotFoundError:
        return out
    if not stat.S_ISDIR(mode):
        out.append(f"{CORRUPT_DIR}: {kind_of(mode)}, not used")
    return out


def _outside_rows(d: Path) -> list[str]:
    try:
        catalog = Catalog.read_only(d / CATALOG_NAME)
    except (sqlite3.Error, FileNotFoundError, ValueError):
        return []
    try:
        rows = catalog.windows()
    except sqlite3.Error:
        return []
    finally:
        catalog.close()
    return [
        f"catalog row {ascii(r.window_id)}: points outside the ring ({ascii(r.file)}), ignored"
        for r in rows
        if not safe_record(r)
    ]


__all__ = ["untrusted_entries"]
