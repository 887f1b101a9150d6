"""The ZIP :class:`~cdml_edge.archive.base.Archive`: members served by the C core or in Python.

The central directory is parsed by the C core when it is built and enabled
(:func:`cdml_edge.archive.native_available`), else by :mod:`.read`; both share :mod:`.format`.
"""

from __future__ import annotations

from typing import Any

from cdml_edge.archive.arena import Arena
from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TooManyMembersError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.names import normalize_member_names
from cdml_edge.archive.native import module as native_module
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.zip import codecs
from cdml_edge.archive.zip.format import (
    FLAG_ENCRYPTED,
    Entry,
    check_count,
    read_central_directory,
)
from cdml_edge.archive.zip.read import check_overlap, parse_central_directory, read_python
from cdml_edge.archive.zip.rows import ZipRows


class ZipArchive(Archive):
    """A ZIP archive (ZIP64, data descriptors, stored / deflate / zstd / bzip2 members)."""

    format = "zip"

    def __init__(
        self,
        source: ByteSource,
        *,
        native: Any = None,
        tail: tuple[int, bytes] | None = None,
        rows: ZipRows | None = None,
        **limits: Any,
    ) -> None:
        """Open ``source`` as ZIP.

        ``native``: the C core (:func:`cdml_edge.archive.native.module`), or ``None`` for
        the Python path; ``tail``: a read of the source's end already made; ``rows``: the
        index already parsed (a pickled archive's), so the source is not read at all.
        """
        super().__init__(source, **limits)
        self._rows = rows if rows is not None else _parse(source, tail, native, self.max_members)
        self._native_index: Any = self._rows.native
        self._entries: list[Entry] = self._rows.entries
        self._row_names = self._rows.row_names
        self._names, self._ids, self._dups = self._rows.names, self._rows.ids, self._rows.dups

    @classmethod
    def open(
        cls, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> ZipArchive:
        """Open ``source`` on the C core when it is built and enabled, else in Python."""
        return cls(source, native=native_module(), tail=tail, **limits)

    def __reduce__(self) -> tuple[Any, ...]:
        # the parsed index travels along: the receiving process reads no index bytes
        return (_restore, (type(self), self._source, self.limits, self._rows))

    @property
    def native(self) -> bool:
        """Whether the index lives in the C core."""
        return self._native_index is not None

    @property
    def engine(self) -> str:  # type: ignore[override]
        """``"native"`` (the C core) or ``"python"``."""
        return "native" if self._native_index is not None else "python"

    def _row(self, i: int) -> Entry:
        if self._native_index is not None:
            return self._native_index.entry(i, self._row_names[i])
        return self._entries[i]

    def _row_name(self, i: int) -> str:
        return self._row_names[i]

    def _info(self, i: int) -> MemberInfo:
        e = self._row(i)
        return MemberInfo(
            name=e[0],
            size=e[3],
            compressed_size=e[2],
            method=codecs.method_name(e[5]),
            checksum=e[4],
            mtime=e[7],
            offset=e[1],
        )

    def _declared_size(self, i: int) -> int:
        return self._row(i)[3]

    def check_entry(self, i: int, e: Entry) -> None:
        """Refuse an encrypted, unsupported, inconsistent or oversized member before reading."""
        if e[6] & FLAG_ENCRYPTED:
            raise UnsupportedArchiveError("encrypted member", archive=self.name, member=e[0])
        if e[5] not in codecs.METHOD_NAMES:
            raise UnsupportedArchiveError(
                codecs.unsupported_method(e[5]), archive=self.name, member=e[0]
            )
        if e[5] == codecs.STORED and e[2] != e[3]:
            raise CorruptArchiveError(
                f"stored member declares {e[3]} bytes but {e[2]} compressed",
                archive=self.name,
                member=e[0],
            )
        self.check_limits(e[0], e[3], e[2], zstd=e[5] == codecs.ZSTD)

    def read(self, name: str) -> bytes:
        """One member's bytes (by the C core when it holds the index)."""
        index = self._native_index
        if index is None or self._closed:
            return super().read(name)
        i = self._ids.get(name)
        if i is None:
            i = self._id(name)  # raises KeyError naming the archive
        return index.read_one(self._source, i, self._row_names, self)

    def _read_ids_into(self, ids: list[int], arena: Arena) -> list[memoryview]:
        if self._native_index is not None:
            return self._native_index.read_into(self._source, ids, self._row_names, self, arena)
        return super()._read_ids_into(ids, arena)

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        if self._native_index is not None:
            return self._native_index.read(self._source, ids, self._row_names, self)
        entries, raws = self._entries, self._rows.raw_names
        for i in ids:
            self.check_entry(i, entries[i])
        names = [raws[i] for i in ids] if raws else None
        return read_python(self._source, [entries[i] for i in ids], self.name, names)


def _parse(
    source: ByteSource, tail: tuple[int, bytes] | None, native: Any, max_members: int
) -> ZipRows:
    """Read and parse the central directory (in C when ``native`` is given).

    More than ``max_members`` entries declared: refused before the directory is parsed.
    """
    cd = read_central_directory(source, tail)
    if cd.count > max_members:
        raise TooManyMembersError.of(source.name, max_members, f"{cd.count:,}")
    entries: list[Entry] = []
    raw_names: list[bytes] = []
    if native is not None:
        index = native.ZipIndex(cd, source.name)
        names, dirs = index.names, index.ndirs
    else:
        index, dirs = None, None
        entries = parse_central_directory(cd, source.name, raw_names)
        names = [e[0] for e in entries]
    check_count(len(names), cd.count, source.name)
    if len(names) > max_members:  # a count past 65,535 without ZIP64 is declared wrapped
        raise TooManyMembersError.of(source.name, max_members, f"{len(names):,}")
    if (normal := normalize_member_names(names)) is not names:  # ./a, a//b -> a, a/b
        names = normal
        entries = [(n, *e[1:]) for n, e in zip(names, entries, strict=False)]
    if index is not None:
        index.check_overlap(names, source.name)
    else:
        check_overlap([(e[1], e[2]) for e in entries], names, source.name)
    rows = ZipRows.build(names, index, entries, dirs)
    rows.raw_names = raw_names
    return rows


def _restore(
    cls: type[ZipArchive], source: ByteSource, opts: dict[str, Any], rows: ZipRows | None
) -> ZipArchive:
    if rows is None:  # the index could not be carried over: read it from the source
        return cls.open(source, **opts)
    return cls(source, rows=rows, **opts)
