"""A closed window packed for a ``watch_and_pack`` callback.

Archive bytes, and the file when an output folder is given.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.fsio import atomic_write
from cdml_edge.modality import modality_for
from cdml_edge.window.items import Window
from cdml_edge.window.manifest import WindowManifest
from cdml_edge.window.pack import pack_window


@dataclass(frozen=True)
class PackedBatch(os.PathLike):
    """One packed window: the archive, what it holds and, when written, where.

    ``archive`` (ZIP or tar.zst bytes with ``manifest.json``), its ``name``, ``manifest``,
    the input ``files`` it holds and, when written, its ``path``.

    It is path-like when written (``open(batch)``, ``LiveBatchLoader(batch)``); the loader
    reads ``archive`` from memory either way.
    """

    archive: bytes
    name: str
    manifest: WindowManifest
    files: tuple[Path, ...]
    path: Path | None = None

    def __fspath__(self) -> str:
        if self.path is None:
            raise TypeError(f"{self.name} was not written (no output_folder): use .archive")
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else self.name

    def __len__(self) -> int:
        return len(self.files)


def pack_batch(
    window: Window, archive_format: str, output_folder: Path | None, device: str | None = None
) -> PackedBatch:
    """Pack ``window`` in memory; with ``output_folder``, also write it there atomically."""
    counts = Counter(modality_for(it.name) for it in window.items)
    packed = pack_window(
        window,
        device=device or socket.gethostname(),
        modality=counts.most_common(1)[0][0] if counts else "binary",
        archive_format=archive_format,
    )
    path = None
    if output_folder is not None:
        output_folder.mkdir(parents=True, exist_ok=True)
        path = output_folder / packed.name
        atomic_write(path, packed.archive)
    files = tuple(it.path for it in window.items if it.path is not None)
    return PackedBatch(packed.archive, packed.name, packed.manifest, files, path)
