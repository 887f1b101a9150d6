"""Reading members of a seekable tar.zst frame by frame: the plan, the limits, the decoders.

A batch of members needs a set of frames (:func:`plan`); each is decoded once, whether one
member or many lie in it, then every member is cut out of its frames and checked against
its CRC-32. Decoded frames go through the archive's :class:`~.cache.FrameCache`. Two
decoders give identical results: :class:`PythonFrames` (the ``zstandard`` package) and the C
core's (:mod:`.native`, libzstd with the GIL released), used when it was built with libzstd.
"""

from __future__ import annotations

import threading
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import zstandard

from cdml_edge.archive.base import RATIO_FLOOR_BYTES, ZSTD_RATIO_SCALE, ratio_words
from cdml_edge.archive.errors import (
    ArchiveError,
    CorruptArchiveError,
    MemberTooLargeError,
    TruncatedArchiveError,
)
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar.cache import FrameCache
from cdml_edge.archive.tar.seekable import FrameTable, MemberIndex
from cdml_edge.archive.zstd_frames import zstd_error

#: a decoded frame is kept in the cache only when this much of it is left once the members
#: read are taken out: other members lie there. A frame of one member (header and padding
#: aside) or inside a big member is not kept, so random reads do not churn the cache.
SPARE_BYTES = 4096


@dataclass(frozen=True)
class FrameBatch:
    """Distinct members as columns, and the frames they need, ascending.

    Member ``j`` is ``members[j]``: its data at ``offs[j]`` in the tar stream, ``sizes[j]``
    bytes, CRC-32 ``crcs[j]``, in frames ``f0[j]..f1[j]`` (``f0 > f1``: empty, no frame).
    """

    members: list[int]
    offs: list[int]
    sizes: list[int]
    crcs: list[int | None]
    f0: list[int]
    f1: list[int]
    frames: list[int]

    def owner(self, k: int) -> int:
        """The first member that needs frame ``k`` (errors name it)."""
        pairs = zip(self.members, self.f0, self.f1, strict=True)
        return next(i for i, a, b in pairs if a <= k <= b)

    def keep(self, table: FrameTable, cache: FrameCache) -> set[int]:
        """The frames worth keeping in ``cache`` once decoded (see :data:`SPARE_BYTES`).

        Never those a member of the batch spans beyond (they hold a big member).
        """
        if cache.max_bytes <= 4 * SPARE_BYTES:
            return set()
        used: dict[int, int] = {}
        for size, a, b in zip(self.sizes, self.f0, self.f1, strict=True):
            if a == b:
                used[a] = used.get(a, 0) + size
            else:
                for k in range(a, b + 1):
                    used[k] = cache.max_bytes
        doff, most = table.doff, cache.max_bytes // 4
        out = set()
        for k in self.frames:
            dsize = doff[k + 1] - doff[k]
            if dsize <= most and dsize - used.get(k, 0) > SPARE_BYTES:
                out.add(k)
        return out


class Reading(Protocol):
    """What a decoder needs from the archive it reads for."""

    max_member_bytes: int
    max_ratio: float

    @property
    def name(self) -> str:
        """The archive's name in messages."""
        ...

    @property
    def source(self) -> ByteSource:
        """The byte source the archive is read from."""
        ...

    def member_name(self, i: int) -> str:
        """The name of member ``i``."""
        ...


def header_key(i: int) -> int:
    """The key of member ``i``'s header span in a :class:`FrameBatch` (and back): ``-1 - i``."""
    return -1 - i


def plan(
    table: FrameTable,
    index: MemberIndex,
    ids: Sequence[int],
    arc: Reading,
    headers: Sequence[int] = (),
) -> FrameBatch:
    """The distinct members of ``ids`` and the frames they need; frame limits checked.

    ``headers``: members whose header span (from their header offset to their data) is cut
    out too, under :func:`header_key` (no CRC-32); the caller checked that it is sane.
    :class:`CorruptArchiveError` names a member that lies past the frames.
    """
    members = list(dict.fromkeys(ids))
    offs = [index.data_offsets[i] for i in members]
    sizes = [index.sizes[i] for i in members]
    if headers:
        heads = list(dict.fromkeys(headers))
        members += [header_key(i) for i in heads]
        offs += [index.header_offsets[i] for i in heads]
        sizes += [index.data_offsets[i] - index.header_offsets[i] for i in heads]
    ends = [o + s for o, s in zip(offs, sizes, strict=True)]
    doff = table.doff
    if members and (table.count == 0 or max(ends) > doff[-1]):
        i = next(i for i, e in zip(members, ends, strict=True) if table.count == 0 or e > doff[-1])
        raise CorruptArchiveError(
            "member lies beyond the frames of the seek table",
            archive=arc.name,
            member=arc.member_name(i),
        )
    # the frames of [off, end): the last starting at or before off, the last starting before
    # end (sizes are never negative: the index was checked against the frames at open)
    f0 = [bisect_right(doff, o) - 1 if s else 1 for o, s in zip(offs, sizes, strict=True)]
    f1 = [bisect_left(doff, e) - 1 if s else 0 for e, s in zip(ends, sizes, strict=True)]
    needed = set(f0) if f0 == f1 else _frames(f0, f1)
    crcs = [index.crcs[i] if i >= 0 else None for i in members]
    batch = FrameBatch(members, offs, sizes, crcs, f0, f1, sorted(needed))
    small = min(RATIO_FLOOR_BYTES, arc.max_member_bytes)  # frames up to this size pass
    for k in batch.frames:
        if doff[k + 1] - doff[k] > small:
            check_frame(table, k, arc, batch.owner(k))
    return batch


def _frames(f0: list[int], f1: list[int]) -> set[int]:
    out: set[int] = set()
    for a, b in zip(f0, f1, strict=True):
        out.update(range(a, b + 1))
    return out


def check_frame(table: FrameTable, k: int, arc: Reading, member: int) -> None:
    """Refuse a frame over the limits members have, before memory is taken.

    That is a frame that declares more than ``max_member_bytes``, or that expands more than
    ``max_ratio`` times :data:`~cdml_edge.archive.base.ZSTD_RATIO_SCALE` (above 1 MiB; by
    default just over what zstd's format allows). The error names ``member``, which needs it.
    """
    dsize = table.doff[k + 1] - table.doff[k]
    csize = table.coff[k + 1] - table.coff[k]
    if dsize > arc.max_member_bytes:
        why = f"zstd frame {k} declares {dsize} bytes, over max_member_bytes"
    elif dsize > RATIO_FLOOR_BYTES and dsize > arc.max_ratio * ZSTD_RATIO_SCALE * max(csize, 1):
        ratio = dsize / max(csize, 1)
        why = f"zstd frame {k} expands {ratio:.0f} times, over {ratio_words(arc, True)}"
    else:
        return
    raise MemberTooLargeError(why, archive=arc.name, member=arc.member_name(member))


def fetch(source: ByteSource, table: FrameTable, frames: Sequence[int]) -> dict[int, memoryview]:
    """The compressed bytes of ``frames``: one range per run of adjacent frames, one request."""
    runs: list[list[int]] = []
    for k in frames:
        if runs and runs[-1][1] == k - 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    ranges = [(table.coff[a], table.coff[b + 1] - table.coff[a]) for a, b in runs]
    bufs = source.pread_many(ranges) if len(ranges) > 1 else [source.pread(*ranges[0])]
    out: dict[int, memoryview] = {}
    for (a, b), buf in zip(runs, bufs, strict=True):
        view = memoryview(buf)
        for k in range(a, b + 1):
            out[k] = view[table.coff[k] - table.coff[a] : table.coff[k + 1] - table.coff[a]]
    return out


def crc_error(stored: int, got: int, arc: Reading, i: int) -> CorruptArchiveError:
    """The error (not raised) for a CRC-32 mismatch of member ``i``."""
    return CorruptArchiveError(
        f"CRC-32 mismatch: stored {stored:08x}, data {got:08x}",
        archive=arc.name,
        member=arc.member_name(i),
    )


class PythonFrames:
    """Frames decoded by the ``zstandard`` package, members cut out in Python."""

    engine = "python"

    def __init__(self) -> None:
        self._local = threading.local()  # a decompressor per thread (they are not shared)

    def _dctx(self) -> Any:
        dctx = getattr(self._local, "dctx", None)
        if dctx is None:
            dctx = self._local.dctx = zstandard.ZstdDecompressor()
        return dctx

    def read(
        self, arc: Reading, table: FrameTable, batch: FrameBatch, cache: FrameCache
    ) -> dict[int, bytes]:
        """The bytes of every member of ``batch``, by member id."""
        plain: dict[int, bytes] = {}
        todo = []
        for k in batch.frames:
            got = cache.get(k)
            if got is None:
                todo.append(k)
            else:
                plain[k] = got
        raw = fetch(arc.source, table, todo) if todo else {}
        dctx = self._dctx()
        keep = batch.keep(table, cache)
        for k in todo:
            try:
                plain[k] = self._frame(dctx, raw[k], table, k, arc.name)
            except ArchiveError as exc:
                member = arc.member_name(batch.owner(k))
                raise type(exc)(exc.reason, archive=exc.archive, member=member) from exc
            if k in keep:
                cache.put(k, plain[k])
        cut = self._cut
        return {i: cut(batch, j, plain, table, arc) for j, i in enumerate(batch.members)}

    @staticmethod
    def _cut(
        batch: FrameBatch, j: int, plain: dict[int, bytes], table: FrameTable, arc: Reading
    ) -> bytes:
        size, f0, f1 = batch.sizes[j], batch.f0[j], batch.f1[j]
        if size == 0:
            data = b""
        else:
            parts = [plain[k] for k in range(f0, f1 + 1)]
            blob = parts[0] if len(parts) == 1 else b"".join(parts)
            start = batch.offs[j] - table.doff[f0]
            data = blob[start : start + size]
        i, crc = batch.members[j], batch.crcs[j]
        if len(data) != size:
            raise TruncatedArchiveError(
                f"member data cut short ({len(data)} of {size} bytes)",
                archive=arc.name,
                member=arc.member_name(i),
            )
        if crc is not None and zlib.crc32(data) != crc:
            raise crc_error(crc, zlib.crc32(data), arc, i)
        return data

    @staticmethod
    def _frame(dctx: Any, data: Any, table: FrameTable, k: int, archive: str) -> bytes:
        dsize = table.doff[k + 1] - table.doff[k]
        if len(data) < table.coff[k + 1] - table.coff[k]:
            raise TruncatedArchiveError(f"zstd frame {k} cut short", archive=archive)
        if dsize == 0:  # a skippable frame (or an empty one): nothing of the tar stream
            return b""
        try:
            declared = zstandard.frame_content_size(data)
            ok = declared in (-1, dsize)
            out = dctx.decompress(data, max_output_size=dsize) if ok else None
        except zstandard.ZstdError as exc:
            raise zstd_error(exc, archive=archive, header=data, what=f"zstd frame {k}") from exc
        if out is None or len(out) != dsize:
            raise CorruptArchiveError(
                f"zstd frame {k} does not hold the {dsize} bytes the seek table says",
                archive=archive,
            )
        return bytes(out)
