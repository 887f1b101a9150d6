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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import zstandard

from cdml_edge.archive.base import RATIO_FLOOR_BYTES
from cdml_edge.archive.errors import (
    ArchiveError,
    CorruptArchiveError,
    MemberTooLargeError,
    TruncatedArchiveError,
)
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar.cache import FrameCache
from cdml_edge.archive.tar.seekable import FrameTable, MemberIndex


@dataclass(frozen=True, slots=True)
class Span:
    """One member of a batch: its data in the tar stream and the frames ``f0..f1`` it needs."""

    member: int
    off: int
    size: int
    crc: int | None
    f0: int
    f1: int


#: a decoded frame is kept in the cache only when this much of it is left once the members
#: read are taken out: other members lie there. A frame of one member (header and padding
#: aside) or inside a big member is not kept, so random reads do not churn the cache.
SPARE_BYTES = 4096


@dataclass(frozen=True)
class Batch:
    """Distinct members (empty ones need no frame) and the frames they need, ascending."""

    spans: list[Span]
    frames: list[int]

    def owner(self, k: int) -> int:
        """The first member that needs frame ``k`` (errors name it)."""
        return next(s.member for s in self.spans if s.f0 <= k <= s.f1)

    def keep(self, table: FrameTable, cache: FrameCache) -> set[int]:
        """The frames worth keeping in ``cache`` once decoded (see :data:`SPARE_BYTES`)."""
        used: dict[int, int] = {}
        for s in self.spans:
            for k in range(s.f0, s.f1 + 1):
                lo = max(s.off, table.doff[k])
                hi = min(s.off + s.size, table.doff[k + 1])
                used[k] = used.get(k, 0) + max(0, hi - lo)
        out = set()
        for k in self.frames:
            dsize = table.doff[k + 1] - table.doff[k]
            if cache.wants(dsize) and dsize - used.get(k, 0) > SPARE_BYTES:
                out.add(k)
        return out


def worth_keeping(table: FrameTable, k: int, s: Span, cache: FrameCache) -> bool:
    """:meth:`Batch.keep` for one member in one frame."""
    dsize = table.doff[k + 1] - table.doff[k]
    return cache.wants(dsize) and dsize - s.size > SPARE_BYTES


class Reading(Protocol):
    """What a decoder needs from the archive it reads for."""

    max_member_bytes: int
    max_ratio: float

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> ByteSource: ...

    def member_name(self, i: int) -> str: ...


def span(table: FrameTable, index: MemberIndex, i: int, archive: str, name: str) -> Span:
    """Where member ``i`` lies; :class:`CorruptArchiveError` when it is past the frames."""
    off, size = index.data_offsets[i], index.sizes[i]
    if table.count == 0 or off + size > table.doff[-1]:
        raise CorruptArchiveError(
            "member lies beyond the frames of the seek table", archive=archive, member=name
        )
    if size == 0:
        return Span(i, off, 0, index.crcs[i], 1, 0)  # no frame needed
    f0, f1 = table.frames_for(off, off + size)
    return Span(i, off, size, index.crcs[i], f0, f1)


def plan(table: FrameTable, index: MemberIndex, ids: Sequence[int], arc: Reading) -> Batch:
    """The distinct members of ``ids`` and the frames they need; frame limits checked."""
    spans = [span(table, index, i, arc.name, arc.member_name(i)) for i in dict.fromkeys(ids)]
    needed: set[int] = set()
    for s in spans:
        needed.update(range(s.f0, s.f1 + 1))
    batch = Batch(spans, sorted(needed))
    small = min(RATIO_FLOOR_BYTES, arc.max_member_bytes)  # frames up to this size pass
    for k in batch.frames:
        if table.doff[k + 1] - table.doff[k] > small:
            check_frame(table, k, arc, batch.owner(k))
    return batch


def check_frame(table: FrameTable, k: int, arc: Reading, member: int) -> None:
    """Refuse a frame that declares more than ``max_member_bytes``, or that expands more than
    ``max_ratio`` times (above 1 MiB): the limits members have, before memory is taken.
    The error names ``member``, which needs the frame."""
    dsize = table.doff[k + 1] - table.doff[k]
    csize = table.coff[k + 1] - table.coff[k]
    if dsize > arc.max_member_bytes:
        why = f"zstd frame {k} declares {dsize} bytes, over max_member_bytes"
    elif dsize > RATIO_FLOOR_BYTES and dsize > arc.max_ratio * max(csize, 1):
        why = f"zstd frame {k} expands {dsize / max(csize, 1):.0f} times, over max_ratio"
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
        self, arc: Reading, table: FrameTable, batch: Batch, cache: FrameCache
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
        return {s.member: self._cut(s, plain, table, arc) for s in batch.spans}

    @staticmethod
    def _cut(s: Span, plain: dict[int, bytes], table: FrameTable, arc: Reading) -> bytes:
        if s.size == 0:
            data = b""
        else:
            parts = [plain[k] for k in range(s.f0, s.f1 + 1)]
            blob = parts[0] if len(parts) == 1 else b"".join(parts)
            start = s.off - table.doff[s.f0]
            data = blob[start : start + s.size]
        if len(data) != s.size:
            raise TruncatedArchiveError(
                f"member data cut short ({len(data)} of {s.size} bytes)",
                archive=arc.name,
                member=arc.member_name(s.member),
            )
        if s.crc is not None and zlib.crc32(data) != s.crc:
            raise crc_error(s.crc, zlib.crc32(data), arc, s.member)
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
            raise CorruptArchiveError(f"zstd frame {k}: {exc}", archive=archive) from exc
        if out is None or len(out) != dsize:
            raise CorruptArchiveError(
                f"zstd frame {k} does not hold the {dsize} bytes the seek table says",
                archive=archive,
            )
        return bytes(out)
