"""A folder of cache files bounded in bytes: what the S3 index cache and the seekable copies share.

Entries are the complete files of given suffixes whose names the caches make (a hash in
lowercase hex, see :func:`is_entry_name`): a folder the user shares with their own archives
never loses one of theirs (files being written carry the temporary prefix and are not
counted either); when the folder holds more than its bound, the least recently
written go first, never the one just written. A file counts its disk space in whole blocks
(:func:`~cdml_edge.fsio.space.on_disk`): a folder of small index files stays within its bound
on the disk too.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from cdml_edge.fsio import block_size, on_disk

Entry = tuple[float, int, Path]
"""``(mtime, disk bytes, path)`` of one complete cache file."""

_HEX = frozenset("0123456789abcdef-")
_MIN_STEM = 32  # the shortest name a cache makes: 32 hex digits


def is_entry_name(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether ``name`` is one the caches give their files: hex digits (and ``-``), a suffix."""
    suffix = next((s for s in suffixes if name.endswith(s)), None)
    if suffix is None:
        return False
    stem = name[: -len(suffix)]
    return len(stem) >= _MIN_STEM and set(stem) <= _HEX


def entries(root: Path, suffixes: tuple[str, ...]) -> list[Entry]:
    """The complete cache files in ``root`` ending with one of ``suffixes``."""
    out: list[Entry] = []
    try:
        listing = list(os.scandir(root))
    except OSError:
        return out
    block = block_size(root)
    for item in listing:
        if not is_entry_name(item.name, suffixes):
            continue
        with contextlib.suppress(OSError):
            st = item.stat()
            out.append((st.st_mtime, on_disk(st.st_size, block), Path(item.path)))
    return out


def evict(root: Path, suffixes: tuple[str, ...], max_bytes: int, keep: Path) -> None:
    """Delete the oldest entries until the folder holds at most ``max_bytes`` (``keep`` stays)."""
    found = sorted(entries(root, suffixes), key=lambda e: e[0])
    total = sum(size for _, size, _ in found)
    for _, size, path in found:
        if total <= max_bytes:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
        total -= size
