"""The ZIP :class:`~cdml_edge.archive.base.Archive`: members served by the C core or in Python.

The central directory is parsed by the C core when it is built and enabled
(:func:`cdml_edge.archive.native_available`), else by :mod:`.read`; both share :mod:`.format`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from cdml_edge.archive.arena import Arena
from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import CorruptArchiveError, UnsupportedArchiveError
from cdml_edge.archive.names import has_dir_names, normalize_member_names
from cdml_edge.archive.native import module as native_module
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.zip import codecs
from cdml_edge.archive.zip.format import FLAG_ENCRYPTED, Entry, read_central_directory
from cdml_edge.archive.zip.read import check_overlap, parse_central_directory, read_python


class ZipArchive(Archive):
    """A ZIP archive (ZIP64, data descriptors, stored / deflate / zstd / bzip2 members)."""

    format = "zip"

    def __init__(
        self,
        source: ByteSource,
        *,
        native: Any = None,
        tail: tuple[int, bytes] | None = None,
        **limits: Any,
    ) -> None:
        """``native``: the C core (:func:`cdml_edge.archive.native.module`), or ``None`` for
        the Python path; ``tail``: a read of the source's end already made."""
        super().__init__(source, **limits)
        cd = read_central_directory(source, tail)
        self._native_index: Any = None
        self._entries: list[Entry] = []
        if native is not None:
            self._native_index = native.ZipIndex(cd, source.name)
            names = self._native_index.names
            spans = self._native_index.spans()
            dirs: int | None = self._native_index.ndirs
        else:
            self._entries = parse_central_directory(cd, source.name)
            names = [e[0] for e in self._entries]
            spans = [(e[1], e[2]) for e in self._entries]
            dirs = None
        if (normal := normalize_member_names(names)) is not names:  # ./a, a//b -> a, a/b
            names = normal
            self._entries = [(n, *e[1:]) for n, e in zip(names, self._entries, strict=False)]
        self._row_names = names
        check_overlap(spans, names, source.name)
        ids = dict(zip(names, range(len(names)), strict=True))
        if len(ids) == len(names) and (dirs == 0 or (dirs is None and not has_dir_names(names))):
            self._names, self._ids = names, ids  # the common case: no directories, no repeats
        else:
            # a later entry of the same name wins (as with unzip); the first position is kept
            self._names = [n for i, n in enumerate(names) if not n.endswith("/") and ids[n] == i]
            first: dict[str, int] = {}
            for i, n in enumerate(names):
                first.setdefault(n, i)
            order = sorted(self._names, key=first.__getitem__)
            self._dups = [n for n, c in Counter(names).items() if c > 1 and not n.endswith("/")]
            self._names = order
            self._ids = {n: ids[n] for n in order}

    @classmethod
    def open(
        cls, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> ZipArchive:
        """Open ``source`` on the C core when it is built and enabled, else in Python."""
        return cls(source, native=native_module(), tail=tail, **limits)

    @property
    def native(self) -> bool:
        return self._native_index is not None

    @property
    def engine(self) -> str:  # type: ignore[override]
        return "native" if self._native_index is not None else "python"

    def _row(self, i: int) -> Entry:
        if self._native_index is not None:
            return self._native_index.entry(i, self._row_names[i])  # type: ignore[no-any-return]
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
        if e[5] not in codecs.METHOD_NAMES or e[5] == codecs.LZMA:
            raise UnsupportedArchiveError(
                f"compression {codecs.method_name(e[5])} is not supported",
                archive=self.name,
                member=e[0],
            )
        if e[5] == codecs.STORED and e[2] != e[3]:
            raise CorruptArchiveError(
                f"stored member declares {e[3]} bytes but {e[2]} compressed",
                archive=self.name,
                member=e[0],
            )
        self.check_limits(e[0], e[3], e[2])

    def read(self, name: str) -> bytes:
        index = self._native_index
        if index is None or self._closed:
            return super().read(name)
        i = self._ids.get(name)
        if i is None:
            i = self._id(name)  # raises KeyError naming the archive
        return index.read_one(self._source, i, self._row_names, self)  # type: ignore[no-any-return]

    def _read_ids_into(self, ids: list[int], arena: Arena) -> list[memoryview]:
        if self._native_index is not None:
            return self._native_index.read_into(  # type: ignore[no-any-return]
                self._source, ids, self._row_names, self, arena
            )
        return super()._read_ids_into(ids, arena)

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        if self._native_index is not None:
            return self._native_index.read(  # type: ignore[no-any-return]
                self._source, ids, self._row_names, self
            )
        entries = self._entries
        for i in ids:
            self.check_entry(i, entries[i])
        return read_python(self._source, [entries[i] for i in ids], self.name)
