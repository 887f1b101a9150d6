"""Reading tar archives: what every tar shares, and plain tar.

What every tar shares: members as columns, limits, CRC-32. tar.zst builds on it in
:mod:`.zst`.
"""

from __future__ import annotations

import zlib
from typing import Any

from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TooManyMembersError,
    TruncatedArchiveError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.members import columns, member_list
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import MemberIndex
from cdml_edge.archive.tar.sparse import SparseMap
from cdml_edge.archive.tar.stream import PreadScanner


class _Members:
    """Member metadata held as columns; ``members[i]`` builds a :class:`TarMember`."""

    def __init__(self, index: MemberIndex) -> None:
        self.index = index

    def __len__(self) -> int:
        return len(self.index.names)

    def __getitem__(self, i: int) -> tarfmt.TarMember:
        x = self.index
        return tarfmt.TarMember(
            x.names[i], x.header_offsets[i], x.data_offsets[i], x.sizes[i], x.mtimes[i]
        )


class _TarBase(Archive):
    def __init__(self, source: ByteSource, **limits: Any) -> None:
        super().__init__(source, **limits)
        self._members = _Members(columns([]))
        self._crcs: list[int | None] = []
        self._refused: dict[int, str] = {}
        self._sparse: dict[int, SparseMap] = {}
        self._skipped: dict[str, str] = {}

    def _set_members(self, index: MemberIndex, skipped: dict[str, str] | None = None) -> None:
        self._use(TarRows.build(index, skipped=skipped))

    def _use(self, rows: TarRows) -> None:
        """Serve the members of ``rows`` (parsed here, or carried over by pickling).

        More entries than ``max_members`` (a kept or carried index): TooManyMembersError.
        """
        entries = len(rows.index) + len(rows.skipped)
        if entries > self.max_members:
            raise TooManyMembersError.of(self.name, self.max_members, f"{entries:,}")
        self._rows = rows
        self._members = _Members(rows.index)
        self._crcs = rows.index.crcs
        self._names, self._ids = rows.names, rows.ids
        self._dups, self._skipped = rows.dups, rows.skipped
        self._refused, self._sparse = rows.index.refused, rows.index.sparse

    @property
    def rows(self) -> TarRows:
        """The member index served (what a pickled archive carries to another process)."""
        return self._rows

    def skipped(self) -> dict[str, str]:
        """Entries that are not files (links, devices), name -> reason; never read."""
        return dict(self._skipped)

    def _refuse(self, ids: list[int]) -> None:
        """Raise for the first member of ``ids`` that is refused (a sparse file, unknown format)."""
        for i in ids:
            why = self._refused.get(i)
            if why is not None:
                raise UnsupportedArchiveError(why, archive=self.name, member=self._row_name(i))

    def __reduce__(self) -> tuple[Any, ...]:
        # the member index travels along: the receiving process reads no index bytes
        return (_restore, (type(self), self._source, self._options(), self._rows))

    def _options(self) -> dict[str, Any]:
        return self.limits

    def _row_name(self, i: int) -> str:
        return self._members[i].name

    def _declared_size(self, i: int) -> int:
        smap = self._sparse.get(i) if self._sparse else None
        return self._members[i].size if smap is None else smap.real_size

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        """Members ``ids``: refused ones raise, sparse ones come back expanded."""
        if self._refused:
            self._refuse(ids)
        if not self._sparse:
            return self._read_stored(ids)
        for i in ids:
            smap = self._sparse.get(i)
            if smap is not None:
                self._check_sparse(i, smap.real_size)
        got = self._read_stored(ids)
        expand = self._sparse.get
        return [
            d if (m := expand(i)) is None else m.expand(d) for i, d in zip(ids, got, strict=True)
        ]

    def _check_sparse(self, i: int, real_size: int) -> None:
        """Hold a sparse member's real size to ``max_ratio`` of the bytes the tar stores.

        In a tar.zst the same tar is held to the same bound (one tar, one answer), and
        its real size to zstd's bound of the compressed bytes as well: no more than what
        zstd data could expand to, holes or none.
        """
        name, stored = self._row_name(i), self._members[i].size
        compressed = self._compressed_size(i)
        self.check_limits(name, real_size, stored)
        if compressed != stored:
            self.check_limits(name, real_size, compressed, zstd=True)

    def _read_stored(self, ids: list[int]) -> list[bytes]:
        """The stored bytes of members ``ids`` (a sparse member's runs, not expanded)."""
        raise NotImplementedError

    def _compressed_size(self, i: int) -> int:
        return self._members[i].size

    def _method(self) -> str:
        return "stored"

    def _info(self, i: int) -> MemberInfo:
        m = self._members[i]
        return MemberInfo(
            name=m.name,
            size=self._declared_size(i),
            compressed_size=self._compressed_size(i),
            method=self._method(),
            checksum=self._crcs[i],
            mtime=m.mtime,
            offset=m.header_offset,
        )

    def _finish(self, i: int, data: bytes) -> bytes:
        m = self._members[i]
        if len(data) != m.size:
            raise TruncatedArchiveError(
                f"member data cut short ({len(data)} of {m.size} bytes)",
                archive=self.name,
                member=m.name,
            )
        crc = self._crcs[i]
        if crc is not None and zlib.crc32(data) != crc:
            raise CorruptArchiveError(
                f"CRC-32 mismatch: stored {crc:08x}, data {zlib.crc32(data):08x}",
                archive=self.name,
                member=m.name,
            )
        return data


class TarArchive(_TarBase):
    """A plain (uncompressed) tar: one header walk at open, one ``pread`` per member."""

    format = "tar"

    def __init__(self, source: ByteSource, *, rows: TarRows | None = None, **limits: Any) -> None:
        """``rows``: the member index already read (a pickled archive's); no header walk."""
        super().__init__(source, **limits)
        if rows is not None:
            self._use(rows)
            return
        scanner = PreadScanner(source)
        members, skipped = member_list(
            source.name,
            lambda cb, sk: tarfmt.scan(
                scanner.read, scanner.skip, source.name, cb, sk, end=source.size()
            ),
            max_members=self.max_members,
        )
        self._set_members(columns(members, skipped), skipped)

    def _read_stored(self, ids: list[int]) -> list[bytes]:
        for i in ids:
            m = self._members[i]
            self.check_limits(m.name, m.size, m.size)
        order = sorted(range(len(ids)), key=lambda k: self._members[ids[k]].data_offset)
        ranges = [(self._members[ids[k]].data_offset, self._members[ids[k]].size) for k in order]
        if len(ranges) > 1:
            bufs = self._source.pread_many(ranges)
        else:
            bufs = [self._source.pread(*r) for r in ranges]
        out: list[bytes] = [b""] * len(ids)
        for k, buf in zip(order, bufs, strict=False):
            out[k] = self._finish(ids[k], buf)
        return out


def _restore(cls: type[_TarBase], source: ByteSource, opts: dict[str, Any], rows: TarRows) -> Any:
    return cls(source, rows=rows, **opts)
