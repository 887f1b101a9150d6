"""Seekable copies of tar.zst archives made by stock tools, kept in a byte-bounded folder.

``tar --zstd`` and ``zstd`` write one zstd frame (``pzstd`` a few large ones): reading a
member at random decompresses from the start of its frame, so a shuffled epoch costs the
square of the archive. Opened through a :class:`SeekableCache`, such an archive (local file
or ``s3://`` object) is converted once into a copy that is read instead (:mod:`.tar.reframe`):

* a **plain tar** (one ``pread`` per member) when zstd shrinks its tar stream by less than a
  quarter (JPEGs, PNGs, audio): written in the one decompression pass any reader of the
  archive needs, no pass before it;
* else a **seekable tar.zst** (the same tar stream in frames of about 16 KiB, our member
  index), written in a second pass after the one that finds the members.

A warning is logged with the copy's path, size and the seconds it took. The next open finds
the copy without reading the source (one ``stat`` or, on S3, the ``HEAD`` the source sends
anyway).

Keys: the file's real path, or the endpoint, bucket and key of the object; each copy is
``<sha256(ident)[:24]>-<sha256(version)[:16]>.tar.zst`` (or ``.tar``) where the version
is the size, ``mtime``, device, inode and ``ctime`` (nanoseconds) of a file, the size and
ETag of an object. A source that changed has a new version, even one put in place with
its old size and ``mtime`` (``cp -p``, ``rsync -t``): its copy is made again and the old
ones deleted (so are copies keyed the earlier way, on size and ``mtime`` alone) unless a
process holds one open (a shared ``flock`` on each of its descriptors): a ctime-only change
(``chmod``, a new hard link) must not pull a copy from under the ranks and spawned workers
reading it; those go with a later version or the byte bound. A copy's name is its key, so
one put in place by another process writing the same copy (DDP ranks sharing the folder)
is the same bytes: a reopen checks its size, not its inode; a copy gone (evicted) is an
:class:`~cdml_edge.archive.errors.ArchiveChangedError` naming the source. Errors met
reading a copy name the source first: ``data.tar.zst (seekable copy /path/of/copy)``.

Full policy: the folder is bounded by ``max_bytes`` (default 20 GiB, or
``CDML_EDGE_SEEKABLE_CACHE_BYTES``). After each copy is written, the least recently used
copies (oldest ``mtime``; reuse refreshes it) are deleted until the total fits. A source
larger than the bound, or a copy that comes out larger, is not kept: the archive is read
as it is (slowly) and a warning says so. A folder that cannot be written counts as the
same. Copies are written atomically, so concurrent processes never read half of one, and
sealed behind their first reader (:mod:`.sealing`): renamed into place before the ``fsync``
that a thread makes meanwhile; a copy found unsealed after a crash is made again. The
temporary file of a write cut short by a crash (a copy's or an index's, not written for
:data:`STALE_TMP_SECONDS`) is deleted when the folder is next evicted.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from cdml_edge.archive.base import Archive
from cdml_edge.archive.cache_folder import Entry, entries, evict, is_entry_name
from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.sealing import is_sealed, sealed_behind
from cdml_edge.archive.source import ByteSource, FileSource
from cdml_edge.archive.tar.plain_index import SUFFIX as INDEX_SUFFIX
from cdml_edge.archive.tar.plain_index import index_path, load_index, save_index
from cdml_edge.archive.tar.read import TarArchive
from cdml_edge.archive.tar.reframe import write_plain_copy
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import read_seekable_tail
from cdml_edge.archive.tar.zst import ZstdTarArchive
from cdml_edge.fsio import TMP_PREFIX, block_size, on_disk
from cdml_edge.units import size_from_env

log = logging.getLogger(__name__)

SEEKABLE_CACHE_ENV = "CDML_EDGE_SEEKABLE_CACHE"
SEEKABLE_CACHE_BYTES_ENV = "CDML_EDGE_SEEKABLE_CACHE_BYTES"
DEFAULT_SEEKABLE_CACHE_BYTES = 20 << 30
_OFF = frozenset({"off", "0", "none", "false", "no"})
_SUFFIX = ".tar.zst"
_PLAIN = ".tar"
#: what a copy's member index holds, part of its name: a copy another release made is not
#: reused (2: hard links are members; the index of a copy made before lacks them)
COPY_FORMAT = 2
STALE_TMP_SECONDS = 24 * 3600  # a temporary file not written for this long: a crashed write's


class _NotWorthIt(Exception):
    """The copy under way is dropped (a plain copy of a stream that compresses well)."""


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
            max_bytes = size_from_env(SEEKABLE_CACHE_BYTES_ENV, DEFAULT_SEEKABLE_CACHE_BYTES)
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
        one; a path: that folder (``"off"``, as the variable's words for none: none);
        ``False`` / ``None``: no cache. Anything else, an empty path included: ``ValueError``.
        """
        if isinstance(setting, SeekableCache) or setting is None or setting is False:
            return setting or None
        if setting is True:
            setting = os.environ.get(SEEKABLE_CACHE_ENV, "").strip() or default_seekable_cache_dir()
        if not isinstance(setting, (str, os.PathLike)) or not str(os.fspath(setting)).strip():
            raise ValueError(
                "seekable_cache must be True, False, None, a folder or a SeekableCache, "
                f"got {setting!r}"
            )
        if isinstance(setting, str) and setting.strip().lower() in _OFF:
            return None
        return cls(setting)

    # -- keys ---------------------------------------------------------------------------
    def path_for(self, source: ByteSource, suffix: str = _SUFFIX) -> Path | None:
        """Where a copy of ``source`` as it is now lives; ``None``: it cannot be keyed.

        ``suffix``: ``.tar.zst`` (a seekable copy) or ``.tar`` (a plain one).
        """
        key = _key(source)
        if key is None:
            return None
        ident, version = key[0], f"{key[1]}|copy format {COPY_FORMAT}"
        ident, version = (hashlib.sha256(k.encode()).hexdigest() for k in (ident, version))
        return self.root / f"{ident[:24]}-{version[:16]}{suffix}"

    def total_bytes(self) -> int:
        """Disk bytes held by complete copies (whole blocks)."""
        return sum(size for _, size, _ in self._entries())

    # -- use ----------------------------------------------------------------------------
    def open(self, source: ByteSource, tail: tuple[int, bytes] | None, **limits: Any) -> Any:
        """``source`` (a tar.zst) opened from its copy, made now if need be.

        A stream without seek table whose tar stream zstd shrinks by less than a quarter
        (JPEGs, PNGs) is copied as plain tar, in the one pass that any reader of it needs
        first; others as a seekable tar.zst. The archive itself when it is seekable
        already, cannot be keyed or kept.
        """
        zst, plain = self.path_for(source), self.path_for(source, _PLAIN)
        if zst is None or plain is None:
            return ZstdTarArchive.open(source, tail=tail, **limits)
        for path in (zst, plain):
            archive = self._reuse(source, path, limits) if path.exists() else None
            if archive is not None:
                return archive
        found = read_seekable_tail(source, tail)
        if found is None:  # no frames known: try the plain copy, with no pass before it
            why = "has no seek table (a random read decompresses from its start)"
            walked: list[TarRows] = []
            writer = _plain_writer(source, walked, limits)
            copy = self._make(source, plain, why, writer)
            if copy is not None:
                if walked:
                    save_index(copy.path, walked[0])
                archive = self._opened(copy, limits, fallback=True, rows=walked)
                if archive is not None:
                    return archive
        archive = ZstdTarArchive.open(source, tail=tail, **limits)
        reason = archive.seekable_copy_reason()
        if reason is None:
            return archive
        copy = self._make(source, zst, reason, archive.write_seekable_copy)
        if copy is None:
            return archive
        archive.close()
        return self._opened(copy, limits)

    def _reuse(self, source: ByteSource, path: Path, limits: dict[str, Any]) -> Any:
        try:
            sealed = is_sealed(path)
        except OSError:
            return None
        if not sealed:
            log.info(
                "%s: its copy %s is not sealed (the machine stopped before its fsync, or "
                "another process is still writing it): made again", source.name, path,
            )  # fmt: skip
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        archive = self._opened(
            SeekableCopy(source.name, str(path), 0, 0.0, True), limits, fallback=True
        )
        if archive is not None:
            log.info("%s: read from its copy %s", source.name, path)
        return archive

    @staticmethod
    def _opened(
        copy: SeekableCopy,
        limits: dict[str, Any],
        fallback: bool = False,
        rows: list[TarRows] | None = None,
    ) -> Any:
        """The archive of ``copy``; with ``fallback``, ``None`` (the copy deleted) if unusable.

        ``rows``: the member index of a plain copy, walked as it was written (no second walk).
        Without, a plain copy is opened from the index kept beside it (:mod:`.tar.plain_index`),
        else walked, and its index kept for the next open.
        """
        cls = TarArchive if copy.path.endswith(_PLAIN) else ZstdTarArchive
        archive: Archive
        walk = False
        try:
            if not rows and cls is TarArchive:
                kept = load_index(copy.path, os.path.getsize(copy.path))
                rows, walk = ([kept], False) if kept is not None else (None, True)
            source = _copy_source(copy)
            if rows:
                source.fileno()  # held from now on, as a walk of the copy would hold it
                archive = TarArchive(source, rows=rows[0], **limits)
            else:
                archive = cls.open(source, **limits)
                if walk and isinstance(archive, TarArchive):  # kept for the next open
                    save_index(copy.path, archive.rows)
        except (ArchiveError, OSError) as exc:
            if not fallback:
                raise
            log.warning("copy %s of %s unusable (%s): not used", copy.path, copy.source, exc)
            _unlink_copy(Path(copy.path))
            return None
        size = os.path.getsize(copy.path)
        archive.seekable_copy = SeekableCopy(  # type: ignore[attr-defined]
            copy.source, copy.path, size, copy.seconds, copy.reused
        )
        return archive

    def _make(
        self, source: ByteSource, path: Path, why: str, write: Callable[[BinaryIO], object]
    ) -> SeekableCopy | None:
        """Write a copy with ``write`` (``False``: not worth keeping); ``None`` if not kept."""
        name = source.name
        if source.size() > self.max_bytes:
            log.warning("%s %s; not copied: larger than the seekable cache", name, why)
            return None
        t0 = time.perf_counter()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with sealed_behind(path, tmp_suffix=path.suffix) as fh:
                if write(fh) is False:
                    raise _NotWorthIt
                size = fh.tell()
        except _NotWorthIt:
            return None
        except (OSError, ArchiveError, EOFError, zstandard.ZstdError) as exc:
            log.warning("%s %s; no copy (%s): read as it is", name, why, exc)
            return None
        seconds = time.perf_counter() - t0
        self._drop_versions(path)
        if on_disk(size, block_size(self.root)) > self.max_bytes:  # as the bound counts
            _unlink_copy(path)
            log.warning("%s %s; its copy is larger than the seekable cache", name, why)
            return None
        self._evict(keep=path)
        kind = "plain tar" if path.name.endswith(_PLAIN) else "seekable"
        log.warning(
            "%s %s: made a %s copy %s (%.1f MB) in %.2f s, reused until the source changes",
            name, why, kind, path, size / 1e6, seconds,
        )  # fmt: skip
        return SeekableCopy(name, str(path), size, seconds, False)

    # -- bound --------------------------------------------------------------------------
    def _entries(self) -> list[Entry]:
        return entries(self.root, (_SUFFIX, _PLAIN))

    def _drop_versions(self, keep: Path) -> None:
        """Delete the copies of other versions of the same source that no process reads.

        A copy held open (a shared ``flock`` on each descriptor, :class:`FileSource`
        ``keyed``) stays: a ctime-only change of the source (``chmod``, a new hard link)
        makes a new version while other processes, and their spawned workers, still read
        the old copy. It goes with the next version made when no one holds it, or by the
        byte bound (least recently used first).
        """
        ident = keep.name.split("-", 1)[0]
        for _, _, path in self._entries():
            if path != keep and path.name.split("-", 1)[0] == ident:
                _unlink_unused(path)

    def _evict(self, keep: Path) -> None:
        evict(self.root, (_SUFFIX, _PLAIN), self.max_bytes, keep)
        old = time.time() - STALE_TMP_SECONDS
        with contextlib.suppress(OSError):  # the kept indexes of copies evicted
            for item in os.scandir(self.root):
                copy = item.path[: -len(INDEX_SUFFIX)]
                ours = item.name.endswith(INDEX_SUFFIX) and is_entry_name(
                    os.path.basename(copy), (_SUFFIX, _PLAIN)
                )
                if ours and not os.path.exists(copy):
                    with contextlib.suppress(OSError):  # the index alone: a copy made
                        os.unlink(item.path)  # again meanwhile by another process stays
                elif item.name.startswith(TMP_PREFIX) and _older(item, old):
                    with contextlib.suppress(OSError):  # a copy or index cut short by a crash
                        os.unlink(item.path)


def _older(item: os.DirEntry[str], than: float) -> bool:
    """Whether ``item`` is a file last written before ``than`` (seconds since the epoch)."""
    try:
        return item.is_file(follow_symlinks=False) and item.stat().st_mtime < than
    except OSError:
        return False


def _unlink_copy(path: Path) -> None:
    """Delete a copy and the member index kept beside it (a plain copy's)."""
    for victim in (path, Path(index_path(path))):
        with contextlib.suppress(OSError):
            victim.unlink()


def _unlink_unused(path: Path) -> None:
    """Delete a copy (and its kept index) unless a process holds it open (its ``flock``)."""
    if fcntl is None:  # pragma: no cover - not POSIX: no way to tell, kept for the bound
        return
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)  # a named pipe planted there is not waited on
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return  # not a copy made here: left alone
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a reader
        log.info("%s: an older copy still read by a process: kept", path)
    else:
        _unlink_copy(path)
    finally:
        os.close(fd)


def _copy_source(copy: SeekableCopy) -> FileSource:
    """The copy's bytes, named after the archive it copies (errors name the user's file).

    ``keyed``: its file name is its source's version, so a copy put in place there by
    another process (ranks sharing the folder, the last rename wins) is the same bytes:
    only its size is checked on a reopen. Its ``mtime`` is not part of its identity
    either: reuse refreshes it (the eviction order).
    """
    name = f"{copy.source} (seekable copy {copy.path})"
    return FileSource(copy.path, name=name, watch_mtime=False, keyed=True)


def _plain_writer(
    source: ByteSource, walked: list[TarRows], limits: dict[str, Any]
) -> Callable[[BinaryIO], bool]:
    """A writer of the plain copy of ``source`` that keeps the member index it walked."""

    def write(out: BinaryIO) -> bool:
        found = write_plain_copy(source, source.size(), out, **limits)
        if isinstance(found, TarRows):
            walked.append(found)
        return found is not False

    return write


def _key(source: ByteSource) -> tuple[str, str] | None:
    """``(identity, version)`` of a local file or an S3 object; ``None`` for others."""
    if isinstance(source, FileSource):
        real = os.path.realpath(source.path)
        st = os.stat(real)
        # the inode and ctime too: a new version put in place keeping the old size and
        # mtime (cp -p, rsync -t, os.utime) has another inode or a newer ctime, never both
        # the same (no user sets a ctime)
        version = f"{st.st_size}|{st.st_mtime_ns}|{st.st_dev}|{st.st_ino}|{st.st_ctime_ns}"
        return f"file|{real}", version
    bucket, key = getattr(source, "bucket", None), getattr(source, "key", None)
    if isinstance(bucket, str) and isinstance(key, str):
        endpoint = getattr(source, "endpoint_url", None) or "aws"
        return f"s3|{endpoint}|{bucket}|{key}", f"{source.size()}|{source.etag}"  # type: ignore[attr-defined]
    return None
