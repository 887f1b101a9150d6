"""Seekable copies of tar.zst archives made by stock tools, kept in a byte-bounded folder.

``tar --zstd`` and ``zstd`` write one zstd frame (``pzstd`` a few large ones): reading a
member at random decompresses from the start of its frame, so a shuffled epoch costs the
square of the archive. Opened through a :class:`SeekableCache`, such an archive (local file
or ``s3://`` object) is converted once, in one pass, into a seekable copy (frames of about
16 KiB, our member index: :mod:`.tar.reframe`), and the copy is read instead; a warning is
logged with its path, size and the seconds it took. The next open finds the copy without
reading the source (one ``stat`` or, on S3, the ``HEAD`` the source sends anyway).

Keys: the file's real path, or the endpoint, bucket and key of the object; each copy is
``<sha256(ident)[:24]>-<sha256(version)[:16]>.tar.zst`` where the version is the size and
``mtime`` (nanoseconds) of a file, the size and ETag of an object. A source that changed
has a new version: its copy is made again and the old one deleted.

Full policy: the folder is bounded by ``max_bytes`` (default 20 GiB, or
``CDML_EDGE_SEEKABLE_CACHE_BYTES``). After each copy is written, the least recently used
copies (oldest ``mtime``; reuse refreshes it) are deleted until the total fits. A source
larger than the bound, or a copy that comes out larger, is not kept: the archive is read
as it is (slowly) and a warning says so. A folder that cannot be written counts as the
same. Copies are written atomically, so concurrent processes never read half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.source import ByteSource, FileSource
from cdml_edge.archive.tar.zst import ZstdTarArchive
from cdml_edge.fsio import TMP_PREFIX, atomic_writer

log = logging.getLogger(__name__)

SEEKABLE_CACHE_ENV = "CDML_EDGE_SEEKABLE_CACHE"
SEEKABLE_CACHE_BYTES_ENV = "CDML_EDGE_SEEKABLE_CACHE_BYTES"
DEFAULT_SEEKABLE_CACHE_BYTES = 20 << 30
_OFF = frozenset({"off", "0", "none", "false", "no"})
_SUFFIX = ".tar.zst"

CacheSetting = Any  # bool | str | os.PathLike[str] | SeekableCache | None


@dataclass(frozen=True)
class SeekableCopy:
    """The seekable copy an archive is read from: made now (``reused=False``) or found."""

    source: str
    path: str
    bytes: int
    seconds: float
    reused: bool


def default_seekable_cache_dir() -> str:
    """The user's cache folder for seekable copies (follows ``$XDG_CACHE_HOME``)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "cdml-edge", "seekable")


class SeekableCache:
    """A folder of seekable copies bounded by ``max_bytes``; see the module for the policy."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int | None = None) -> None:
        if max_bytes is None:
            max_bytes = int(os.environ.get(SEEKABLE_CACHE_BYTES_ENV, DEFAULT_SEEKABLE_CACHE_BYTES))
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.root = Path(root)
        self.max_bytes = int(max_bytes)

    def __repr__(self) -> str:
        return f"SeekableCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    @classmethod
    def from_setting(cls, setting: CacheSetting) -> SeekableCache | None:
        """The cache a dataset's ``seekable_cache`` setting names (``None``: none).

        ``True``: the folder of ``CDML_EDGE_SEEKABLE_CACHE`` (``off``: none) or the default
        one; a path: that folder; ``False`` / ``None``: no cache.
        """
        if isinstance(setting, SeekableCache) or setting is None or setting is False:
            return setting or None
        if setting is True:
            value = os.environ.get(SEEKABLE_CACHE_ENV, "").strip()
            if value.lower() in _OFF:
                return None
            return cls(value or default_seekable_cache_dir())
        return cls(setting)

    # -- keys ---------------------------------------------------------------------------
    def path_for(self, source: ByteSource) -> Path | None:
        """Where the copy of ``source`` as it is now lives; ``None``: it cannot be keyed."""
        key = _key(source)
        if key is None:
            return None
        ident, version = (hashlib.sha256(k.encode()).hexdigest() for k in key)
        return self.root / f"{ident[:24]}-{version[:16]}{_SUFFIX}"

    def total_bytes(self) -> int:
        """Bytes held by complete copies."""
        return sum(size for _, size, _ in self._entries())

    # -- use ----------------------------------------------------------------------------
    def open(self, source: ByteSource, tail: tuple[int, bytes] | None, **limits: Any) -> Any:
        """``source`` (a tar.zst) opened from its seekable copy, made now if need be.

        The archive itself when it is seekable already, cannot be keyed or kept.
        """
        path = self.path_for(source)
        if path is not None and path.exists():
            archive = self._reuse(source, path, limits)
            if archive is not None:
                return archive
        archive = ZstdTarArchive.open(source, tail=tail, **limits)
        why = archive.seekable_copy_reason()
        if why is None or path is None:
            return archive
        copy = self._make(source, archive, path, why)
        if copy is None:
            return archive
        archive.close()
        return self._opened(copy, limits)

    def _reuse(self, source: ByteSource, path: Path, limits: dict[str, Any]) -> Any:
        with contextlib.suppress(OSError):
            os.utime(path)
        try:
            archive = self._opened(SeekableCopy(source.name, str(path), 0, 0.0, True), limits)
        except (ArchiveError, OSError) as exc:  # damaged: made again
            log.warning("seekable copy %s of %s unusable (%s): made again", path, source.name, exc)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        log.info("%s: read from its seekable copy %s", source.name, path)
        return archive

    @staticmethod
    def _opened(copy: SeekableCopy, limits: dict[str, Any]) -> ZstdTarArchive:
        archive = ZstdTarArchive.open(FileSource(copy.path), **limits)
        size = os.path.getsize(copy.path)
        archive.seekable_copy = SeekableCopy(
            copy.source, copy.path, size, copy.seconds, copy.reused
        )
        return archive

    def _make(
        self, source: ByteSource, archive: ZstdTarArchive, path: Path, why: str
    ) -> SeekableCopy | None:
        """Write the copy; ``None`` (with a warning) when it is not kept."""
        name = source.name
        if source.size() > self.max_bytes:
            log.warning("%s %s; not copied: larger than the seekable cache", name, why)
            return None
        t0 = time.perf_counter()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with atomic_writer(path, tmp_suffix=_SUFFIX) as fh:
                archive.write_seekable_copy(fh)
                size = fh.tell()
        except OSError as exc:
            log.warning("%s %s; no seekable copy (%s): read as it is", name, why, exc)
            return None
        seconds = time.perf_counter() - t0
        self._drop_versions(path)
        if size > self.max_bytes:
            with contextlib.suppress(OSError):
                path.unlink()
            log.warning("%s %s; its copy is larger than the seekable cache", name, why)
            return None
        self._evict(keep=path)
        log.warning(
            "%s %s: made a seekable copy %s (%.1f MB) in %.2f s, reused until the source "
            "changes",
            name, why, path, size / 1e6, seconds,
        )  # fmt: skip
        return SeekableCopy(name, str(path), size, seconds, False)

    # -- bound --------------------------------------------------------------------------
    def _entries(self) -> list[tuple[float, int, Path]]:
        out: list[tuple[float, int, Path]] = []
        try:
            listing = list(os.scandir(self.root))
        except OSError:
            return out
        for item in listing:
            if not item.name.endswith(_SUFFIX) or item.name.startswith(TMP_PREFIX):
                continue
            with contextlib.suppress(OSError):
                st = item.stat()
                out.append((st.st_mtime, st.st_size, Path(item.path)))
        return out

    def _drop_versions(self, keep: Path) -> None:
        """Delete the copies of other versions of the same source."""
        ident = keep.name.split("-", 1)[0]
        for _, _, path in self._entries():
            if path != keep and path.name.split("-", 1)[0] == ident:
                with contextlib.suppress(OSError):
                    path.unlink()

    def _evict(self, keep: Path) -> None:
        entries = sorted(self._entries(), key=lambda e: e[0])
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if path != keep:
                with contextlib.suppress(OSError):
                    path.unlink()
                total -= size


def _key(source: ByteSource) -> tuple[str, str] | None:
    """``(identity, version)`` of a local file or an S3 object; ``None`` for others."""
    if isinstance(source, FileSource):
        real = os.path.realpath(source.path)
        st = os.stat(real)
        return f"file|{real}", f"{st.st_size}|{st.st_mtime_ns}"
    bucket, key = getattr(source, "bucket", None), getattr(source, "key", None)
    if isinstance(bucket, str) and isinstance(key, str):
        endpoint = getattr(source, "endpoint_url", None) or "aws"
        return f"s3|{endpoint}|{bucket}|{key}", f"{source.size()}|{source.etag}"  # type: ignore[attr-defined]
    return None
