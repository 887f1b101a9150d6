"""The :class:`Archive` interface shared by every format, and :class:`MemberInfo`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from cdml_edge.archive.arena import Arena
from cdml_edge.archive.errors import ArchiveError, MemberTooLargeError
from cdml_edge.archive.names import normalize_member_name
from cdml_edge.archive.source import ByteSource

DEFAULT_MAX_MEMBER_BYTES = 1 << 30
DEFAULT_MAX_RATIO = 1100.0
#: entries an archive may hold (files, links, devices): its index costs about 450 bytes an
#: entry at open, and a tar.zst of a million empty headers is 43 KB (see ``max_members``)
DEFAULT_MAX_MEMBERS = 1_000_000
#: zstd data is held to ``max_ratio`` times this. ``max_ratio`` is in deflate's terms (1100 is
#: just over deflate's maximum, 1,032); zstd's is 32 times that (32,768: a 4-byte RLE block
#: for each 128 KiB), so by default only what zstd cannot produce is refused (35,200). That
#: is per member (or frame), read one at a time; a walk over a whole tar.zst stream at open
#: is held to ``max_ratio`` itself past ``max_member_bytes`` (:mod:`.tar.expansion`): no
#: archive of real data shrinks 1,100 times as a whole, and a walk pays for every member.
ZSTD_RATIO_SCALE = 32
# Ratios are only enforced above this output size: small members are harmless.
RATIO_FLOOR_BYTES = 1 << 20
# ``verify()`` and iteration read members in batches of at most this many output bytes.
BATCH_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """What an archive declares about one member.

    ``checksum`` is the CRC-32 of the member's bytes where the format stores one (ZIP;
    tar.zst written by :func:`pack`), else ``None``. ``mtime`` is seconds since the epoch.
    ``offset`` is where the member's header starts (ZIP: local header in the file; tar:
    header in the uncompressed tar stream). For tar.zst, ``compressed_size`` is the
    member's share of the compressed frames that hold it.
    """

    name: str
    size: int
    compressed_size: int
    method: str
    checksum: int | None
    mtime: float
    offset: int


class Archive:
    """A read-only archive: ``names()``, ``info()``, ``read()``, ``read_many()``, ``verify()``.

    Thread-safe (reads are positional and share no mutable state), fork-safe (file
    handles are reopened when the process id changes) and picklable (ZIP and tar
    archives carry their parsed index as compact arrays, so the receiving process reads
    no index bytes; :meth:`clone` is the same without pickling).
    """

    format: str = "?"
    #: which reader serves members: ``"native"`` (the C core) or ``"python"``
    engine: str = "python"

    def __init__(
        self,
        source: ByteSource,
        *,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        max_ratio: float = DEFAULT_MAX_RATIO,
        max_members: int = DEFAULT_MAX_MEMBERS,
    ) -> None:
        self._source = source
        self.max_member_bytes = int(max_member_bytes)
        self.max_ratio = float(max_ratio)
        self.max_members = int(max_members)
        #: members up to this size need no limit check (under the cap and the ratio floor)
        self.fast_limit = min(self.max_member_bytes, RATIO_FLOOR_BYTES)
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._dups: list[str] = []
        self._closed = False

    # -- identity -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The archive's name in messages (path, ``<memory>``, ``s3://...``)."""
        return self._source.name

    @property
    def source(self) -> ByteSource:
        """The byte source the archive is read from."""
        return self._source

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} format={self.format} members={len(self)}>"

    # -- members ------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Member names in archive order, in normal form; directories are left out.

        ``./a//b`` is served as ``a/b``, see :mod:`cdml_edge.archive.names`.
        """
        return list(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._ids or (
            isinstance(name, str) and normalize_member_name(name) in self._ids
        )

    def _id(self, name: str) -> int:
        """The row of a member, looked up by its name as served or as stored (``./a``)."""
        i = self._ids.get(name)
        if i is None:
            i = self._ids.get(normalize_member_name(name))
        if i is None:
            raise KeyError(f"{self.name}: no member named {name!r}")
        return i

    def info(self, name: str) -> MemberInfo:
        """Declared metadata of one member (nothing is decompressed)."""
        return self._info(self._id(name))

    def infos(self) -> list[MemberInfo]:
        """Metadata of every member, in archive order."""
        return [self._info(self._ids[n]) for n in self._names]

    def read(self, name: str) -> bytes:
        """The bytes of one member, checked against its checksum when it has one."""
        self._check_open()
        return self._read_ids([self._id(name)])[0]

    @overload
    def read_many(self, names: Sequence[str], arena: None = None) -> list[bytes]: ...

    @overload
    def read_many(self, names: Sequence[str], arena: Arena) -> list[memoryview]: ...

    def read_many(
        self, names: Sequence[str], arena: Arena | None = None
    ) -> list[bytes] | list[memoryview]:
        """Read a batch of members in one call (one ``pread_many`` on the source).

        With an :class:`~cdml_edge.archive.arena.Arena`, members are read into its reused
        buffer (ZIP on the C core: decompressed there directly, GIL released) and come back
        as read-only ``memoryview`` objects, valid until the next read into that arena; checksums
        are checked as without it. Without, each member is a fresh ``bytes``.
        """
        self._check_open()
        ids = [self._id(n) for n in names]
        if not ids:
            return []
        return self._read_ids(ids) if arena is None else self._read_ids_into(ids, arena)

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        for batch in self._batches(self._ids[n] for n in self._names):
            yield from zip((self._row_name(i) for i in batch), self._read_ids(batch), strict=False)

    def duplicates(self) -> list[str]:
        """Names that more than one entry carries (reads get the last of them)."""
        return list(self._dups)

    def skipped(self) -> dict[str, str]:
        """Entries that are not files (tar links, devices), name -> reason; never read."""
        return {}

    def verify(self) -> list[str]:
        """Read every member; names of those that fail (bad checksum/data), then duplicates."""
        bad: list[str] = []
        for batch in self._batches(self._ids[n] for n in self._names):
            try:
                self._read_ids(batch)
                continue
            except ArchiveError:
                pass
            for i in batch:  # find the culprits one by one
                try:
                    self._read_ids([i])
                except ArchiveError:
                    bad.append(self._row_name(i))
        return bad + [n for n in self._dups if n not in bad]

    def _batches(self, ids: Iterable[int]) -> Iterator[list[int]]:
        batch: list[int] = []
        total = 0
        for i in ids:
            size = min(self._declared_size(i), self.max_member_bytes)
            if batch and total + size > BATCH_BYTES:
                yield batch
                batch, total = [], 0
            batch.append(i)
            total += size
        if batch:
            yield batch

    # -- limits -------------------------------------------------------------------------
    @property
    def limits(self) -> dict[str, Any]:
        """The limits the archive was opened with, as keyword arguments of ``open``."""
        return {
            "max_member_bytes": self.max_member_bytes,
            "max_ratio": self.max_ratio,
            "max_members": self.max_members,
        }

    def ratio_limit(self, zstd: bool = False) -> float:
        """The expansion allowed: ``max_ratio``, times :data:`ZSTD_RATIO_SCALE` for zstd data."""
        return self.max_ratio * ZSTD_RATIO_SCALE if zstd else self.max_ratio

    def check_limits(self, name: str, size: int, csize: int, *, zstd: bool = False) -> None:
        """Refuse a member declaring more than ``max_member_bytes`` or the ratio allow.

        ``zstd``: the member is zstd data (held to :meth:`ratio_limit` of zstd).
        """
        if size > self.max_member_bytes:
            raise MemberTooLargeError(
                f"declares {size} bytes, over max_member_bytes={self.max_member_bytes}",
                archive=self.name,
                member=name,
            )
        limit = self.ratio_limit(zstd)
        if size > RATIO_FLOOR_BYTES and size > limit * max(csize, 1):
            raise MemberTooLargeError(
                f"expansion ratio {size / max(csize, 1):.0f} over {ratio_words(self, zstd)}",
                archive=self.name,
                member=name,
            )

    # -- lifecycle ----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ArchiveError("archive is closed", archive=self.name)

    def close(self) -> None:
        """Release the source's handles. Reading afterwards raises :class:`ArchiveError`."""
        self._closed = True
        self._source.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(
        cls, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> Archive:
        """Open ``source`` as this format.

        ``tail`` is the ``(offset, bytes)`` read of the source's end that format detection
        made, for formats that can reuse it.
        """
        return cls(source, **limits)

    def clone(self) -> Archive:
        """An archive over the same source and parsed index, with its own reader state.

        What unpickling gives, without the bytes (a forked worker's copy).
        """
        rebuild, args = self.__reduce__()[:2]
        return rebuild(*args)

    def __reduce__(self) -> tuple[Any, ...]:
        # the receiving process opens the source again as the same format (no detection)
        return (_reopen, (type(self), self._source, self.limits))

    # -- format hooks -------------------------------------------------------------------
    def _row_name(self, i: int) -> str:
        return self._names[i]

    def _info(self, i: int) -> MemberInfo:
        raise NotImplementedError

    def _declared_size(self, i: int) -> int:
        raise NotImplementedError

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        raise NotImplementedError

    def _read_ids_into(self, ids: list[int], arena: Arena) -> list[memoryview]:
        """Members read as ``bytes``, then copied into ``arena``.

        Formats with an in-place read override this.
        """
        return arena.fill(self._read_ids(ids))


def ratio_words(arc: Any, zstd: bool) -> str:
    """The ratio limit as messages give it (``max_ratio=1100``, ``35200 for zstd ...``)."""
    if not zstd:
        return f"max_ratio={arc.max_ratio:g}"
    ratio, scale = arc.max_ratio, ZSTD_RATIO_SCALE
    return f"{ratio * scale:g} for zstd (max_ratio={ratio:g} x {scale})"


def _reopen(cls: type[Archive], source: ByteSource, opts: dict[str, Any]) -> Archive:
    return cls.open(source, **opts)
