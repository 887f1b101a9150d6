"""A seekable copy of a tar.zst that is one zstd frame (or a few): one pass, same tar stream.

:func:`write_plain_copy` writes the tar stream itself (a plain tar, read by ``pread``) when
zstd saves little on it (JPEGs, PNGs); it needs no pass before it to find the members.

A tar.zst made by stock tools (``tar --zstd``, ``zstd``) is one frame: reading a member
decompresses the stream from its start. :func:`write_seekable_copy` decompresses it once and
compresses the very same tar stream again as independent frames of about ``frame_bytes``,
cut where members' headers start (as :mod:`.write` cuts), then appends our member index
(the offsets found when the archive was opened, which the copy keeps, and a CRC-32 of each
member computed on the way) and the seek table. ``zstd -dc copy | tar -t`` still lists it.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import BinaryIO

import zstandard

from cdml_edge.archive.base import DEFAULT_MAX_MEMBER_BYTES, DEFAULT_MAX_MEMBERS, DEFAULT_MAX_RATIO
from cdml_edge.archive.errors import StreamTooLargeError, TruncatedArchiveError
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar import seekable
from cdml_edge.archive.tar.expansion import ExpansionLimit
from cdml_edge.archive.tar.members import columns, member_list
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import FrameTable, MemberIndex
from cdml_edge.archive.tar.stream import FrameStream
from cdml_edge.archive.tar.write import FRAME_BYTES, MAX_FRAME_BYTES


def frame_cuts(starts: Sequence[int], frame_bytes: int = FRAME_BYTES) -> list[int]:
    """Where frames start: at member headers, about ``frame_bytes`` of tar stream apart.

    A member larger than a frame gets frames of its own, cut every :data:`MAX_FRAME_BYTES`.
    """
    cuts, prev = [0], 0
    for s in sorted(set(starts)):
        if s <= cuts[-1]:
            continue
        if s - cuts[-1] > frame_bytes and prev > cuts[-1]:
            cuts.append(prev)
        while s - cuts[-1] > MAX_FRAME_BYTES:
            cuts.append(cuts[-1] + MAX_FRAME_BYTES)
        prev = s
    return cuts


class _Crcs:
    """CRC-32 of each member, taken as consecutive blocks of the tar stream go by."""

    def __init__(self, index: MemberIndex) -> None:
        self._d, self._s = index.data_offsets, index.sizes
        self._order = sorted(range(len(self._d)), key=self._d.__getitem__)
        self.values = [0] * len(self._d)
        self._next = 0  # first member (in stream order) not complete yet

    def add(self, block: bytes, pos: int) -> None:
        """Account tar-stream bytes ``[pos, pos + len(block))``."""
        end, view = pos + len(block), memoryview(block)
        order, d, s = self._order, self._d, self._s
        k = self._next
        while k < len(order):
            i = order[k]
            a, b = d[i], d[i] + s[i]
            if a >= end:
                break
            lo, hi = max(a, pos), min(b, end)
            if hi > lo:
                self.values[i] = zlib.crc32(view[lo - pos : hi - pos], self.values[i])
            if b <= end and k == self._next:
                self._next += 1
            k += 1

    @property
    def complete(self) -> bool:
        """Whether every member's bytes went by."""
        return self._next == len(self._order)


def write_seekable_copy(
    source: ByteSource,
    end: int,
    index: MemberIndex,
    out: BinaryIO,
    *,
    level: int = 3,
    frame_bytes: int = FRAME_BYTES,
) -> int:
    """Write the seekable copy of the tar.zst ``source`` (zstd data up to ``end``) to ``out``.

    ``index``: the members found when it was opened. Returns the bytes of tar stream.
    """
    stream = FrameStream(source, end)
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
    crcs = _Crcs(index)
    sizes: list[tuple[int, int]] = []
    cuts = frame_cuts(index.header_offsets, frame_bytes)
    pos = 0
    for k in itertools.count():  # the cuts, then the rest a frame at a time
        want = cuts[k + 1] - pos if k + 1 < len(cuts) else MAX_FRAME_BYTES
        block = stream.read(want)
        if not block:
            break
        crcs.add(block, pos)
        packed = cctx.compress(block)
        out.write(packed)
        sizes.append((len(packed), len(block)))
        pos += len(block)
    if not crcs.complete:
        raise TruncatedArchiveError("zstd stream ends inside a member", archive=source.name)
    coff = list(itertools.accumulate((c for c, _ in sizes), initial=0))
    doff = list(itertools.accumulate((d for _, d in sizes), initial=0))
    out.write(_index(index, crcs.values, FrameTable(coff, doff), sizes))
    return pos


PLAIN_PROBE_BYTES = 4 << 20
"""Tar stream decompressed before :func:`write_plain_copy` judges the compression ratio."""
PLAIN_MAX_RATIO = 1.25
"""Above this ratio (tar stream ÷ compressed) a plain copy is not written: too much disk."""


def write_plain_copy(
    source: ByteSource,
    end: int,
    out: BinaryIO,
    *,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_ratio: float = DEFAULT_MAX_RATIO,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
) -> TarRows | bool:
    """Write the tar stream of the tar.zst ``source`` (zstd data up to ``end``) to ``out``.

    The member headers are walked as the stream goes by (the walk :class:`~.read.TarArchive`
    makes at open), and the blocks are written by a thread of their own meanwhile; returns
    the member index found, so that the copy is opened without a second walk. ``False``
    (``out`` left half written) as soon as the stream proves to compress by more than
    :data:`PLAIN_MAX_RATIO`, judged after :data:`PLAIN_PROBE_BYTES` and at the end. The C
    core writes and walks it when it can (:mod:`.native_copy`), with the same results.
    More than ``max_members`` entries: :class:`~cdml_edge.archive.errors.TooManyMembersError`.
    ``False`` too, written no further, for a stream past ``max_ratio`` times its compressed
    bytes once past ``max_member_bytes`` (:mod:`.expansion`: a bomb the open's walk names).
    """
    limit = ExpansionLimit(source.name, max_ratio, max_member_bytes)
    copier = plain_copier()
    if copier is not None and copier.serves(source, end, out):
        with _BlockWriter(out) as writer:  # the probe as below, its blocks written (a
            try:  # full disk fails it the same way), before the C core copies it all
                _TeeStream(FrameStream(source, end), writer.put).probe()
            except _Compressible:
                return False
        out.seek(0)
        out.truncate()
        found = copier.plain_copy(source, end, out, PLAIN_MAX_RATIO, max_members, limit)
        if found is not None:
            return found
    stream = FrameStream(source, end, limit)
    with _BlockWriter(out) as writer:
        tee = _TeeStream(stream, writer.put)
        try:
            tee.probe()
            members, skipped = member_list(
                source.name,
                lambda cb, sk: tarfmt.scan(tee.read, tee.skip, source.name, cb, sk),
                stream.frame_header,
                max_members=max_members,
            )
            tee.drain()
        except (_Compressible, StreamTooLargeError):
            return False
    if tee.shrinks_well():
        return False
    return TarRows.build(columns(members, skipped), skipped=skipped)


class _Compressible(Exception):
    """The tar stream shrinks too well for a plain copy (judged on its first bytes)."""


class _TeeStream:
    """The tar stream in blocks of up to :data:`MAX_FRAME_BYTES`, each handed to ``sink``.

    ``read`` and ``skip`` serve a header walk as :class:`~.stream.PreadScanner` does over
    the copy: short reads at the end, a skip past the end leaves nothing to read.
    """

    def __init__(self, stream: FrameStream, sink: Callable[[bytes], None]) -> None:
        self._stream, self._sink = stream, sink
        self._ready: collections.deque[bytes] = collections.deque()  # taken, not walked
        self._block = b""
        self._at = 0
        self._ahead = 0  # bytes a skip went past the end of the stream
        self.taken = 0

    def probe(self) -> None:
        """Take the first :data:`PLAIN_PROBE_BYTES`; :class:`_Compressible` if they shrink well.

        Judged before any walk, so a stream that gets a seekable copy instead costs no walk.
        """
        while self.taken < PLAIN_PROBE_BYTES and self._take():
            pass
        if self.shrinks_well():
            raise _Compressible

    def shrinks_well(self) -> bool:
        """Whether the stream taken so far is over :data:`PLAIN_MAX_RATIO` times its zstd."""
        return self.taken > PLAIN_MAX_RATIO * max(self._stream.compressed_read, 1)

    def _take(self) -> bool:
        block = self._stream.read(MAX_FRAME_BYTES)
        if not block:
            return False
        self._sink(block)
        self.taken += len(block)
        self._ready.append(block)
        return True

    def _next(self) -> bool:
        if not self._ready and not self._take():
            return False
        self._block, self._at = self._ready.popleft(), 0
        return True

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes of the stream (short at its end)."""
        at = self._at
        if at + n <= len(self._block):
            self._at = at + n
            return self._block[at : at + n]
        parts = []
        while n > 0 and not self._ahead:
            if self._at >= len(self._block) and not self._next():
                break
            take = min(n, len(self._block) - self._at)
            parts.append(self._block[self._at : self._at + take])
            self._at += take
            n -= take
        return b"".join(parts)

    def skip(self, n: int) -> None:
        """Move ``n`` bytes on (the bytes still go to the sink)."""
        while n > 0 and not self._ahead:
            if self._at >= len(self._block) and not self._next():
                break
            take = min(n, len(self._block) - self._at)
            self._at += take
            n -= take
        self._ahead += n

    def drain(self) -> None:
        """Hand the rest of the stream (after the end-of-archive marker) to the sink."""
        self._ready.clear()
        while self._take():
            self._ready.clear()


class _BlockWriter:
    """Writes blocks to ``out`` in a thread of its own, at most :data:`WRITE_AHEAD` queued.

    The thread's ``write`` releases the GIL: the disk write overlaps the decompression and
    the header walk. An error of the write is raised from :meth:`put` or at the end.
    """

    WRITE_AHEAD = 4  # blocks of up to 1 MiB waiting for the disk

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._queue: queue.Queue[bytes | None] = queue.Queue(self.WRITE_AHEAD)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="copy-writer", daemon=True)

    def __enter__(self) -> _BlockWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error

    def put(self, block: bytes) -> None:
        """Queue ``block`` for writing (waits while :data:`WRITE_AHEAD` are queued)."""
        if self._error is not None:
            raise self._error
        self._queue.put(block)

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._out.write(block)
                except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                    self._error = exc


def _index(
    index: MemberIndex, crcs: list[int], table: FrameTable, sizes: list[tuple[int, int]]
) -> bytes:
    """The member index and the seek table frames closing the copy."""
    records = []
    for i, name in enumerate(index.names):
        d, s = index.data_offsets[i], index.sizes[i]
        f0, f1 = table.frames_for(d, d + s)
        records.append((name, index.header_offsets[i], d, s, index.mtimes[i], crcs[i], f0, f1))
    frame = seekable.index_frame(records)
    return frame + seekable.seek_table_frame([*sizes, (len(frame), 0)])
