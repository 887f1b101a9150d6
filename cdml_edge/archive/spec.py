"""What an archive format gives the package: :class:`ArchiveFormat`, and what it is given.

Each format folder (``zip/``, ``tar/``) describes itself with an :class:`ArchiveFormat`:
how its bytes are recognised (tests on a :class:`Probe`), which :class:`Archive` class
opens it, and how it is written. :mod:`cdml_edge.archive.formats` lists them.

Detection runs the tests of every format by rank, lowest first; the first that holds
names the format. Tail tests rank first: the tail is read at open anyway and the format
that opens the archive reuses it, so ZIP and seekable tar.zst open without another request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import BinaryIO, Protocol

from cdml_edge.archive.base import Archive
from cdml_edge.archive.source import ByteSource

# One read of the tail holds a ZIP end record with the longest comment, the ZIP64 records
# and, for most archives, the whole central directory or the tar.zst seek table and index.
TAIL_BYTES = 1 << 17
HEAD_BYTES = 512  # the first block: magic numbers, a tar header

# Detection ranks (lowest first; ties go in the order of ``formats.FORMATS``).
RANK_TAIL = 10  # a structure that ends the file (ZIP end record, seekable footer)
RANK_MAGIC = 20  # magic bytes at offset 0
RANK_HEADER = 30  # a checksummed header at offset 0 (tar)
RANK_LAST = 40  # what is left: damaged or padded archives


def read_tail(source: ByteSource) -> tuple[int, bytes]:
    """``(offset, bytes)`` of the last :data:`TAIL_BYTES` of the source (one request)."""
    size = source.size()
    start = max(0, size - TAIL_BYTES)
    return start, source.pread(start, size - start)


class Probe:
    """The bytes detection looks at: the tail (read at once) and the head (read on demand)."""

    def __init__(self, source: ByteSource, tail_read: tuple[int, bytes] | None = None) -> None:
        self.source = source
        #: ``(offset, bytes)`` of the tail, handed to the format that opens the archive
        self.tail_read = tail_read if tail_read is not None else read_tail(source)

    @property
    def tail(self) -> bytes:
        """The bytes of the tail read."""
        return self.tail_read[1]

    @cached_property
    def head(self) -> bytes:
        """The first :data:`HEAD_BYTES` (from the tail when it starts at 0: no request)."""
        start, tail = self.tail_read
        return tail[:HEAD_BYTES] if start == 0 else self.source.pread(0, HEAD_BYTES)


@dataclass(frozen=True)
class WriteOptions:
    """How :func:`~cdml_edge.archive.pack` asks a format to write."""

    level: int  # compression level (each format clamps it to its range)
    mtime: float  # recorded for every member
    frame_bytes: int  # target uncompressed frame size, for formats written in frames


class Writer(Protocol):
    """A format's writer: ``items`` to a binary file."""

    def __call__(
        self, out: BinaryIO, items: Sequence[tuple[str, bytes]], options: WriteOptions
    ) -> None:
        """Write ``items`` (names already checked, in order) to ``out``."""


Test = Callable[[Probe], bool]


@dataclass(frozen=True)
class ArchiveFormat:
    """One archive format, as its folder describes it."""

    name: str  # "zip", "tar.zst": the name :func:`~cdml_edge.archive.pack` takes
    title: str  # the name in messages ("ZIP")
    archive: type[Archive]  # ``archive.open(source, tail=..., **limits)`` opens it
    tests: tuple[tuple[int, Test], ...]  # ``(rank, test)``: how detection recognises it
    write: Writer | None = None  # ``None``: read only
    suffixes: tuple[str, ...] = ()  # file names :func:`write_archive` writes in it (lower case)
    aliases: tuple[str, ...] = ()  # other names :func:`pack` accepts

    def called(self, name: str) -> bool:
        """Whether ``name`` is this format's name or one of its aliases."""
        return name == self.name or name in self.aliases
