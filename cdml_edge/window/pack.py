"""Closed window -> archive bytes in memory (ZIP or seekable tar.zst) + ``manifest.json``.

The archive holds one member per item, named after the file (or frame), and the
:class:`~cdml_edge.window.manifest.WindowManifest` as ``manifest.json``: what the pipeline,
the retention ring and replay read to know what is inside. Nothing touches the disk.
"""

from __future__ import annotations

import hashlib
import posixpath
import time
from dataclasses import dataclass

from cdml_edge.window.items import Window
from cdml_edge.window.manifest import MANIFEST_NAME, ManifestItem, WindowManifest

ARCHIVE_SUFFIX = {"zip": ".zip", "tar.zst": ".tar.zst"}


@dataclass
class PackedWindow:
    """A window packed in memory, ready for the pipeline."""

    window: Window
    manifest: WindowManifest
    archive: bytes
    name: str
    pack_ms: float


def member_names(names: list[str]) -> list[str]:
    """Archive member names for item names: POSIX separators, unique, never ``manifest.json``."""
    out: list[str] = []
    seen = {MANIFEST_NAME}
    for n in names:
        base = posixpath.normpath(n.replace("\\", "/")).lstrip("/")
        if base.startswith("../") or base in ("", ".", ".."):
            base = posixpath.basename(base) or "item"
        cand, k = base, 1
        while cand in seen:
            stem, ext = posixpath.splitext(base)
            cand = f"{stem}.{k}{ext}"
            k += 1
        seen.add(cand)
        out.append(cand)
    return out


def build_manifest(
    window: Window,
    *,
    device: str,
    modality: str,
    archive_format: str = "zip",
    site: str | None = None,
) -> WindowManifest:
    """The manifest of a closed window (without results)."""
    members = member_names([it.name for it in window.items])
    items = tuple(
        ManifestItem(
            id=it.item_id,
            member=m,
            name=it.name,
            size=len(it.data),
            mtime_ns=it.mtime_ns,
            ts=it.ts,
            sha256=hashlib.sha256(it.data).hexdigest(),
            modality=it.modality if it.modality != modality else None,
        )
        for it, m in zip(window.items, members, strict=True)
    )
    return WindowManifest(
        window_id=window.window_id,
        device=device,
        site=site,
        source=window.source,
        modality=modality,
        archive_format=archive_format,  # type: ignore[arg-type]
        opened_at=window.opened_ts,
        closed_at=window.closed_ts or time.time(),
        items=items,
    )


def pack_window(
    window: Window,
    *,
    device: str,
    modality: str,
    archive_format: str = "zip",
    level: int = 3,
    site: str | None = None,
) -> PackedWindow:
    """Pack a closed window into archive bytes (members + ``manifest.json``)."""
    from cdml_edge.archive import pack

    t0 = time.perf_counter()
    manifest = build_manifest(
        window, device=device, modality=modality, archive_format=archive_format, site=site
    )
    members = [(mi.member, it.data) for mi, it in zip(manifest.items, window.items, strict=True)]
    archive = pack(
        members, format=archive_format, level=level, manifest=manifest.model_dump(mode="json")
    )
    name = window.window_id + ARCHIVE_SUFFIX.get(archive_format, ".zip")
    return PackedWindow(window, manifest, archive, name, (time.perf_counter() - t0) * 1000.0)
