"""Sidecar index cache for ``s3://`` archives: the byte ranges read at open, on local disk.

Opening an archive reads its tail and its central directory / member index. The cache keeps
those ranges in one file per object, so opening the same object again costs one ``HEAD``
(to compare the ETag) and no ranged ``GET`` for the index.

Layout: ``<root>/<sha256(endpoint|bucket|key)[:32]>.s3idx``, each file a small binary header
(magic, JSON with ETag, size, ranges, CRC-32, and the latency and bandwidth measured
while fetching them) followed by the range bytes, mode 0600. Writes
go through :func:`cdml_edge.fsio.atomic_writer`, so concurrent processes never see half an entry.

Full policy: the folder is bounded by ``max_bytes``. After each write the least recently
used entries (oldest ``mtime``; a hit refreshes it) are deleted until the total fits, and
so is the temporary file of an entry cut short by a crash once it is a day old (a younger
one may be another process's write under way). An entry larger than ``max_bytes`` on its
own is not stored. A corrupt or unreadable entry counts as a miss and is deleted, and so
is anything else found under an entry's name (a FIFO, a device, a symbolic link, a file
larger than ``max_bytes``), without waiting on it or reading it. A folder
that cannot be written (read-only, full) only counts ``write_errors``: the archive is read
all the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import struct
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.archive.cache_folder import Entry, entries, evict
from cdml_edge.fsio import TMP_PREFIX, atomic_writer, block_size, on_disk

DEFAULT_INDEX_CACHE_BYTES = 256 << 20
_MAGIC = b"CDS3IDX1"
_HEAD = struct.Struct("<8sI")
_SUFFIX = ".s3idx"
#: a temporary entry not written for this long was cut short by a crash (deleted at eviction)
STALE_TMP_SECONDS = 24 * 3600


@dataclass(frozen=True)
class CachedIndex:
    """One cached entry: the object's ETag and size, and the ``(offset, bytes)`` ranges."""

    etag: str
    size: int
    chunks: tuple[tuple[int, bytes], ...]
    #: ``(latency s, bandwidth B/s)`` measured on the store when stored (see :mod:`.pace`)
    pace: tuple[float | None, float | None] = (None, None)


class S3IndexCache:
    """A byte-bounded folder of cached index ranges, keyed by endpoint, bucket and key.

    The ETag stored in an entry is compared by the caller with the object's current ETag;
    a mismatch means the object changed and the entry is replaced on the next write.
    """

    def __init__(self, root: str | os.PathLike[str], max_bytes: int = DEFAULT_INDEX_CACHE_BYTES):
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        #: entries that could not be written (folder not writable, disk full)
        self.write_errors = 0

    def __repr__(self) -> str:
        return f"S3IndexCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict[str, object]:
        return {"root": str(self.root), "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.root = Path(str(state["root"]))
        self.max_bytes = int(state["max_bytes"])  # type: ignore[call-overload]
        self.write_errors = 0

    # -- keys ---------------------------------------------------------------------------
    @staticmethod
    def ident(endpoint: str | None, bucket: str, key: str) -> str:
        """The cache identity of an object (the ETag is checked separately)."""
        return f"{endpoint or 'aws'}|{bucket}|{key}"

    def path_for(self, ident: str) -> Path:
        """The file of the entry for ``ident`` (a hash of it, under ``root``)."""
        digest = hashlib.sha256(ident.encode("utf-8")).hexdigest()[:32]
        return self.root / f"{digest}{_SUFFIX}"

    # -- read ---------------------------------------------------------------------------
    def get(self, ident: str) -> CachedIndex | None:
        """The entry for ``ident``, or ``None`` (missing or corrupt; corrupt ones are removed)."""
        try:
            raw = _read_entry(self.path_for(ident), self.max_bytes)
        except FileNotFoundError:
            return None
        entry = _decode(raw, ident) if raw is not None else None
        if entry is None:
            self.discard(ident)
        return entry

    def touch(self, ident: str) -> None:
        """Mark an entry as just used (LRU order is ``mtime``; a link's target is left alone)."""
        with contextlib.suppress(OSError, NotImplementedError):
            os.utime(self.path_for(ident), follow_symlinks=False)

    def discard(self, ident: str) -> None:
        """Remove the entry for ``ident``, if there is one."""
        with contextlib.suppress(OSError):
            self.path_for(ident).unlink()

    # -- write --------------------------------------------------------------------------
    def put(
        self,
        ident: str,
        etag: str,
        size: int,
        chunks: Sequence[tuple[int, bytes]],
        pace: tuple[float | None, float | None] = (None, None),
    ) -> bool:
        """Store an entry atomically, then evict LRU entries over the bound.

        Returns ``False`` when the entry alone is over ``max_bytes`` in whole blocks (nothing is
        stored).
        """
        raw = _encode(ident, etag, size, chunks, pace)
        if on_disk(len(raw), block_size(self.root)) > self.max_bytes:  # as the bound counts
            return False
        path = self.path_for(ident)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with atomic_writer(path, mode=0o600, tmp_suffix=_SUFFIX) as fh:
                fh.write(raw)
        except OSError:  # a read-only or full cache folder costs speed, never the read
            self.write_errors += 1
            return False
        self._evict(keep=path)
        return True

    def total_bytes(self) -> int:
        """Disk bytes held by complete entries (whole blocks)."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[Entry]:
        return entries(self.root, (_SUFFIX,))

    def _evict(self, keep: Path) -> None:
        evict(self.root, (_SUFFIX,), self.max_bytes, keep)
        old = time.time() - STALE_TMP_SECONDS
        with contextlib.suppress(OSError):
            for item in os.scandir(self.root):
                if item.name.startswith(TMP_PREFIX) and item.name.endswith(_SUFFIX):
                    with contextlib.suppress(OSError):  # an entry cut short by a crash
                        if item.is_file(follow_symlinks=False) and item.stat().st_mtime < old:
                            os.unlink(item.path)


_ENTRY_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)  # a symbolic link is no entry the cache wrote
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once (and is then refused)
    | getattr(os, "O_CLOEXEC", 0)
)


def _read_entry(path: Path, limit: int) -> bytes | None:
    """The bytes of the entry file at ``path``, or ``None`` when it is no entry of ours.

    Only a regular file (a link is not followed) of at most ``limit`` bytes, the folder's
    bound, is read: a FIFO, a device, a link or an oversized file planted under an entry's
    name costs neither a wait nor memory. Raises ``FileNotFoundError`` when there is none.
    """
    try:
        fd = os.open(path, _ENTRY_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:  # a link (ELOOP), no permission, ...
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        parts: list[bytes] = []
        left = st.st_size
        while left > 0:
            part = os.read(fd, left)
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def _encode(
    ident: str,
    etag: str,
    size: int,
    chunks: Sequence[tuple[int, bytes]],
    pace: tuple[float | None, float | None],
) -> bytes:
    payload = b"".join(data for _, data in chunks)
    header = json.dumps(
        {
            "ident": ident,
            "etag": etag,
            "size": int(size),
            "ranges": [[int(off), len(data)] for off, data in chunks],
            "crc32": zlib.crc32(payload),
            "pace": list(pace),
        },
        separators=(",", ":"),
    ).encode("utf-8")
    return _HEAD.pack(_MAGIC, len(header)) + header + payload


def _decode(raw: bytes, ident: str) -> CachedIndex | None:
    if len(raw) < _HEAD.size:
        return None
    magic, hlen = _HEAD.unpack_from(raw)
    if magic != _MAGIC or _HEAD.size + hlen > len(raw):
        return None
    try:
        header = json.loads(raw[_HEAD.size : _HEAD.size + hlen])
        ranges = [(int(o), int(n)) for o, n in header["ranges"]]
        etag, size, crc = str(header["etag"]), int(header["size"]), int(header["crc32"])
        lat, bw = header.get("pace") or (None, None)
        pace = (float(lat) if lat else None, float(bw) if bw else None)
        if header["ident"] != ident:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    payload = raw[_HEAD.size + hlen :]
    if sum(n for _, n in ranges) != len(payload) or zlib.crc32(payload) != crc:
        return None
    chunks: list[tuple[int, bytes]] = []
    pos = 0
    for off, n in ranges:
        chunks.append((off, payload[pos : pos + n]))
        pos += n
    return CachedIndex(etag=etag, size=size, chunks=tuple(chunks), pace=pace)
