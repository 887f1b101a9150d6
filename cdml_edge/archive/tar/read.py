"""Reading tar archives: plain tar, seekable tar.zst and ordinary single-frame tar.zst."""

from __future__ import annotations

import dataclasses
import operator
import zlib
from collections.abc import Callable
from typing import Any

import zstandard

from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import (
    ArchiveError,
    CorruptArchiveError,
    MemberTooLargeError,
    TruncatedArchiveError,
)
from cdml_edge.archive.names import has_dir_names, normalize_member_names
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.seekable import FrameTable, MemberIndex, read_tail
from cdml_edge.archive.tar.stream import ExactReader, FrameStream, PreadScanner


def _member_list(
    archive: str, scan: Callable[[Callable[[tarfmt.TarMember], None]], int]
) -> tuple[list[tarfmt.TarMember], int]:
    members: list[tarfmt.TarMember] = []
    try:
        length = scan(members.append)
    except EOFError:
        raise TruncatedArchiveError("tar stream ends inside a member", archive=archive) from None
    except zstandard.ZstdError as exc:
        raise CorruptArchiveError(f"zstd data: {exc}", archive=archive) from exc
    return members, length


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


def _columns(members: list[tarfmt.TarMember]) -> MemberIndex:
    return MemberIndex(
        [m.name for m in members],
        [m.header_offset for m in members],
        [m.data_offset for m in members],
        [m.size for m in members],
        [m.mtime for m in members],
        [None] * len(members),
    )


class _TarBase(Archive):
    def __init__(self, source: ByteSource, **limits: Any) -> None:
        super().__init__(source, **limits)
        self._members = _Members(_columns([]))
        self._crcs: list[int | None] = []

    def _set_members(self, index: MemberIndex) -> None:
        if (normal := normalize_member_names(index.names)) is not index.names:
            index = dataclasses.replace(index, names=normal)  # ./a, a//b -> a, a/b
        self._members = _Members(index)
        self._crcs = index.crcs
        names = index.names
        ids = dict(zip(names, range(len(names)), strict=True))
        if len(ids) == len(names) and not has_dir_names(names):
            self._names, self._ids = names, ids
            return
        # a later copy of a name wins, as with tar -x; directories are left out
        keep = {i for n, i in ids.items() if not n.endswith("/")}
        self._names = [n for i, n in enumerate(names) if i in keep]
        self._ids = {n: ids[n] for n in self._names}

    def _row_name(self, i: int) -> str:
        return self._members[i].name

    def _declared_size(self, i: int) -> int:
        return self._members[i].size

    def _compressed_size(self, i: int) -> int:
        return self._members[i].size

    def _method(self) -> str:
        return "stored"

    def _info(self, i: int) -> MemberInfo:
        m = self._members[i]
        return MemberInfo(
            name=m.name,
            size=m.size,
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

    def __init__(self, source: ByteSource, **limits: Any) -> None:
        super().__init__(source, **limits)
        scanner = PreadScanner(source)
        members, _ = _member_list(
            source.name, lambda cb: tarfmt.scan(scanner.read, scanner.skip, source.name, cb)
        )
        self._set_members(_columns(members))

    def _read_ids(self, ids: list[int]) -> list[bytes]:
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


class ZstdTarArchive(_TarBase):
    """tar.zst: seekable (frames + index in the tail) or an ordinary single zstd stream.

    With our member index, opening reads only the tail (≤2 requests) and decompresses
    nothing. Without it, one sequential pass over the whole stream builds the index. An
    ordinary single-frame tar.zst has no frame boundaries to seek to: each read then
    decompresses from the start of the stream up to the member (``read_many`` does one
    pass for the whole batch).
    """

    format = "tar.zst"

    def __init__(
        self, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> None:
        super().__init__(source, **limits)
        found = read_tail(source, tail)
        self._frames: FrameTable | None = found.frames if found else None
        self._data_end = found.data_end if found else source.size()
        if found is not None and found.index is not None:
            self._index_members(found.index, found.frames)
        else:
            reader = ExactReader(FrameStream(source, self._data_end))
            members, _ = _member_list(
                source.name, lambda cb: tarfmt.scan(reader.read, reader.skip, source.name, cb)
            )
            self._set_members(_columns(members))

    @classmethod
    def open(
        cls, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> ZstdTarArchive:
        """Open ``source``; the seek table and member index come from ``tail`` if it holds them."""
        return cls(source, tail=tail, **limits)

    @property
    def seekable(self) -> bool:
        return self._frames is not None

    def _index_members(self, index: MemberIndex, frames: FrameTable) -> None:
        total = frames.doff[-1]
        ends = list(map(operator.add, index.data_offsets, index.sizes))
        if max(ends, default=0) <= total and min(index.sizes, default=0) >= 0:
            self._set_members(index)
            return
        for k, end in enumerate(ends):
            if end > total or index.sizes[k] < 0:
                raise CorruptArchiveError(
                    "member index points past the end of the frames",
                    archive=self.name,
                    member=index.names[k],
                )
        self._set_members(index)

    def _method(self) -> str:
        return "zstd"

    def _compressed_size(self, i: int) -> int:
        m = self._members[i]
        f = self._frames
        if f is None:
            total_c, total_d = self._data_end, max(self._members[-1].data_offset, 1)
            return int(m.size * total_c / total_d)
        f0, f1 = f.frames_for(m.data_offset, m.data_offset + m.size)
        c = f.coff[f1 + 1] - f.coff[f0]
        d = max(f.doff[f1 + 1] - f.doff[f0], 1)
        return int(c * m.size / d)

    def _read_ids(self, ids: list[int]) -> list[bytes]:
        for i in ids:
            m = self._members[i]
            self.check_limits(m.name, m.size, self._compressed_size(i))
        if self._frames is None:
            return self._read_streaming(ids)
        return self._read_frames(ids, self._frames)

    def _read_frames(self, ids: list[int], f: FrameTable) -> list[bytes]:
        if not ids:
            return []
        spans = []
        needed: set[int] = set()
        for i in ids:
            m = self._members[i]
            if f.count == 0 or m.data_offset + m.size > f.doff[-1]:
                raise CorruptArchiveError(
                    "member lies beyond the frames of the seek table", archive=self.name,
                    member=m.name,
                )
            if m.size == 0:
                spans.append((1, 0))  # empty member: no frame needed
                continue
            f0, f1 = f.frames_for(m.data_offset, m.data_offset + m.size)
            spans.append((f0, f1))
            needed.update(range(f0, f1 + 1))
        frames = sorted(needed)
        # contiguous runs of frames become one range each
        runs: list[tuple[int, int]] = []
        for k in frames:
            if runs and runs[-1][1] == k - 1:
                runs[-1] = (runs[-1][0], k)
            else:
                runs.append((k, k))
        ranges = [(f.coff[a], f.coff[b + 1] - f.coff[a]) for a, b in runs]
        if len(ranges) > 1:
            bufs = self._source.pread_many(ranges)
        else:
            bufs = [self._source.pread(*r) for r in ranges]
        plain: dict[int, bytes] = {}
        dctx = zstandard.ZstdDecompressor()
        for (a, b), buf in zip(runs, bufs, strict=False):
            for k in range(a, b + 1):
                lo, hi = f.coff[k] - f.coff[a], f.coff[k + 1] - f.coff[a]
                try:
                    plain[k] = self._frame(
                        dctx, buf[lo:hi], f.doff[k + 1] - f.doff[k], k, hi - lo
                    )
                except ArchiveError as exc:
                    if exc.member is not None:
                        raise
                    # name the (first) member that needs this frame
                    owner = next(
                        self._members[i].name
                        for i, (f0, f1) in zip(ids, spans, strict=False)
                        if f0 <= k <= f1
                    )
                    raise type(exc)(exc.reason, archive=exc.archive, member=owner) from exc
        out = []
        for i, (f0, f1) in zip(ids, spans, strict=False):
            m = self._members[i]
            if f0 > f1:
                out.append(self._finish(i, b""))
                continue
            blob = plain[f0] if f0 == f1 else b"".join(plain[k] for k in range(f0, f1 + 1))
            start = m.data_offset - f.doff[f0]
            out.append(self._finish(i, blob[start : start + m.size]))
        return out

    def _frame(self, dctx: Any, data: bytes, dsize: int, k: int, csize: int) -> bytes:
        if len(data) < csize:
            raise TruncatedArchiveError(f"zstd frame {k} cut short", archive=self.name)
        if dsize > self.max_member_bytes:
            raise MemberTooLargeError(
                f"zstd frame {k} declares {dsize} bytes, over max_member_bytes", archive=self.name
            )
        try:
            declared = zstandard.frame_content_size(data)
        except zstandard.ZstdError as exc:
            raise CorruptArchiveError(f"zstd frame {k}: {exc}", archive=self.name) from exc
        if declared not in (-1, dsize):
            raise CorruptArchiveError(
                f"zstd frame {k} holds {declared} bytes, seek table says {dsize}", archive=self.name
            )
        try:
            out = dctx.decompress(data, max_output_size=dsize)
        except zstandard.ZstdError as exc:
            raise CorruptArchiveError(f"zstd frame {k}: {exc}", archive=self.name) from exc
        if len(out) != dsize:
            raise CorruptArchiveError(
                f"zstd frame {k} holds {len(out)} bytes, seek table says {dsize}", archive=self.name
            )
        return out

    def _read_streaming(self, ids: list[int]) -> list[bytes]:
        reader = ExactReader(FrameStream(self._source, self._data_end))
        pos = 0
        out: list[bytes] = [b""] * len(ids)
        order = sorted(range(len(ids)), key=lambda k: self._members[ids[k]].data_offset)
        cache: dict[int, bytes] = {}
        try:
            for k in order:
                m = self._members[ids[k]]
                if ids[k] in cache:
                    out[k] = cache[ids[k]]
                    continue
                reader.skip(m.data_offset - pos)
                data = reader.read(m.size)
                pos = m.data_offset + len(data)
                out[k] = cache[ids[k]] = self._finish(ids[k], data)
        except EOFError:
            raise TruncatedArchiveError("zstd stream ends early", archive=self.name) from None
        except zstandard.ZstdError as exc:
            raise CorruptArchiveError(f"zstd data: {exc}", archive=self.name) from exc
        return out
