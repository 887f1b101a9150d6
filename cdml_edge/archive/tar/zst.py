"""tar.zst archives: seekable (frames, seek table, our member index) or one zstd stream."""

from __future__ import annotations

import operator
from bisect import bisect_right
from functools import cached_property
from typing import TYPE_CHECKING, Any

import zstandard

from cdml_edge.archive.errors import ArchiveError, CorruptArchiveError, TruncatedArchiveError
from cdml_edge.archive.names import normalize_member_name
from cdml_edge.archive.native import frame_decoder, plain_copier
from cdml_edge.archive.source import ByteSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.cache import FRAME_CACHE_BYTES, FrameCache
from cdml_edge.archive.tar.cursor import CursorSlot
from cdml_edge.archive.tar.expansion import ExpansionLimit
from cdml_edge.archive.tar.frames import PythonFrames, check_frame, header_key, plan
from cdml_edge.archive.tar.members import columns, member_list
from cdml_edge.archive.tar.read import _TarBase
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import (
    FrameTable,
    MemberIndex,
    SeekableTail,
    read_seekable_tail,
)
from cdml_edge.archive.tar.stream import ExactReader, FrameStream
from cdml_edge.archive.tar.write import MAX_FRAME_BYTES
from cdml_edge.archive.zstd_frames import zstd_error

if TYPE_CHECKING:
    from typing import BinaryIO


#: most bytes from a member's header offset to its data: pax and long-name records (each
#: at most :data:`~.format.MAX_META`) and the header block
_MAX_HEADER_SPAN = 2 * tarfmt.MAX_META + 4 * tarfmt.BLOCK
#: the largest size a ustar size field holds in octal (a larger one needs a pax record)
_MAX_USTAR_SIZE = 0o77777777777


def _ustar_holds(name: str) -> bool:
    """Whether every writer puts ``name`` in a ustar header's name field as it is.

    ASCII of up to 100 bytes; a longer name may be split into the prefix field or cut
    there (with the whole name in a pax or long-name record before the header).
    """
    return name.isascii() and len(name) <= 100 and "\x00" not in name


def _cut_name_of(field: bytes, name: str) -> bool:
    """Whether a full ustar name ``field`` can be the first 100 bytes of a raw name of ``name``.

    The raw name is ``name`` before its normal form (``./`` prefixes, ``.`` parts and repeated
    slashes dropped): the field's whole parts must be ``name``'s first parts, and its last,
    perhaps cut, part the start of ``name``'s next one. Names that differ in their first
    100 bytes (as two swapped in our index) are refused.
    """
    try:
        raw = field.decode()
    except UnicodeDecodeError:  # cut inside a UTF-8 character
        raw = field.decode(errors="ignore")
    got = [p for p in raw.split("/") if p not in ("", ".")]
    want = normalize_member_name(name).split("/")
    if not got:
        return True
    if len(got) > len(want) or got[:-1] != want[: len(got) - 1]:
        return False
    return want[len(got) - 1].startswith(got[-1])


def _plain_header_of(span: bytes, name: str, size: int) -> bool:
    """Whether ``span`` is a plain ustar file header of ``name`` and ``size``.

    The quick test of most headers; ``False`` leaves the judgement to the full parse.
    """
    if len(span) != tarfmt.BLOCK or not _ustar_holds(name):
        return False
    n = len(name)
    return (
        span[:n] == name.encode()
        and (n == 100 or span[n] == 0)
        and span[156:157] in tarfmt.REGULAR
        and (span[257:263] != tarfmt.POSIX_MAGIC or span[345] == 0)
        and span[124:136] == b"%011o\x00" % size
        and tarfmt.header_ok(span)
    )


class ZstdTarArchive(_TarBase):
    """tar.zst: seekable (frames + index in the tail) or an ordinary single zstd stream.

    With our member index, opening reads only the tail (≤2 requests) and decompresses
    nothing. Without it, one sequential pass over the whole stream builds the index. Reads
    of a seekable archive decode only the frames that hold the members, each once per
    batch, through a cache of decoded frames bounded by ``frame_cache_bytes`` (default
    1 MiB); the C core decodes them when it was built with libzstd (``engine``). An
    ordinary single-frame tar.zst has no frame boundaries to seek to: each read then
    decompresses from the start of the stream up to the member (``read_many`` does one
    pass for the whole batch).
    """

    format = "tar.zst"

    def __init__(
        self,
        source: ByteSource,
        *,
        tail: tuple[int, bytes] | None = None,
        frame_cache_bytes: int = FRAME_CACHE_BYTES,
        rows: TarRows | None = None,
        check_headers: bool = False,
        **limits: Any,
    ) -> None:
        """Open ``source``; with ``rows``, without reading it.

        ``rows``: the member index and frames already read (a pickled archive's);
        ``check_headers``: they come from our member index, whose members' tar headers
        are checked when they are read (:meth:`_check_header`), not from a header walk.
        """
        super().__init__(source, **limits)
        self._cache = FrameCache(frame_cache_bytes)
        decoder = frame_decoder()
        self._decoder: Any = decoder.NativeFrames() if decoder is not None else PythonFrames()
        #: why the seek table was not used (its frames were found by a pass instead)
        self.seek_table_problem: str | None = None
        #: the seekable copy read instead of the source (see :mod:`..seekable_cache`)
        self.seekable_copy: Any = None
        #: members whose tar header was read and agrees with the member index
        self._headers_ok: set[int] = set()
        self._check_headers = check_headers
        if rows is not None:
            self._frames: FrameTable | None = rows.frames
            self._data_end = rows.data_end
            self._use(rows)
            return
        found = read_seekable_tail(source, tail)
        self._frames = found.frames if found else None
        self._data_end = found.data_end if found else source.size()
        if found is not None and found.index is not None:
            self._check_headers = True  # believed at open, checked member by member on reads
            self._index_members(found.index, found.frames)
        else:
            self._scan_members(found)

    def _scan_members(self, found: SeekableTail | None) -> None:
        """Members by one pass over the stream; a seek table's frames are checked by it.

        A seek table without our member index is not trusted: the pass records where each
        frame really ends, and those boundaries serve the reads. When the table says
        otherwise (an entry too many, sizes that do not add up), it is not used.
        """
        source = self._source
        copier = plain_copier() if found is None else None
        limit = ExpansionLimit.of(self)
        walked = (
            copier.walked_members(source, source.size(), self.max_members, limit)
            if copier is not None
            else None
        )
        if walked is not None:  # the C core walked it all: the same members and skips
            self._set_members(*walked)
            return
        stream = FrameStream(source, found.stream_end if found else source.size(), limit)
        reader = ExactReader(stream)
        members, skipped = member_list(
            source.name,
            lambda cb, sk: tarfmt.scan(reader.read, reader.skip, source.name, cb, sk),
            stream.frame_header,
            max_members=self.max_members,
        )
        if found is not None:
            try:
                coff, doff = stream.table()
            except EOFError:
                raise TruncatedArchiveError("zstd stream ends early", archive=self.name) from None
            except zstandard.ZstdError as exc:
                head = stream.frame_header()
                raise zstd_error(exc, archive=self.name, header=head) from exc
            told = found.frames
            if told.coff[: len(coff)] != coff or told.doff[: len(doff)] != doff:
                self.seek_table_problem = (
                    "the seek table does not match the frames of the stream; "
                    "the frames found by a pass over the stream are used"
                )
            self._frames, self._data_end = FrameTable(coff, doff), coff[-1]
        self._set_members(columns(members, skipped), skipped)

    @classmethod
    def open(
        cls, source: ByteSource, *, tail: tuple[int, bytes] | None = None, **limits: Any
    ) -> ZstdTarArchive:
        """Open ``source``; the seek table and member index come from ``tail`` if it holds them."""
        return cls(source, tail=tail, **limits)

    def _set_members(self, index: MemberIndex, skipped: dict[str, str] | None = None) -> None:
        self._use(TarRows.build(index, self._frames, self._data_end, skipped))

    def _options(self) -> dict[str, Any]:
        return {
            **super()._options(),
            "frame_cache_bytes": self._cache.max_bytes,
            "check_headers": self._check_headers,
        }

    @property
    def seekable(self) -> bool:
        """Whether the archive has a seek table (members are read frame by frame)."""
        return self._frames is not None

    def seekable_copy_reason(self) -> str | None:
        """Why reads at random would be slow (one frame, or frames of over 1 MiB), or ``None``.

        ``None`` also when a copy could not keep the members as they are (sparse or refused
        members, hard links: its member index has a header before each member's data).
        """
        if self._sparse or self._refused or self._has_links():
            return None
        f = self._frames
        if f is None:
            return "has no seek table (a random read decompresses from its start)"
        if f.count and f.doff[-1] / f.count > MAX_FRAME_BYTES:
            return f"has {f.count} zstd frames of {f.doff[-1] // f.count >> 20} MiB on average"
        return None

    def _has_links(self) -> bool:
        """Whether a member is a hard link (served from data before its own header)."""
        x = self._members.index
        return any(map(operator.lt, x.data_offsets, x.header_offsets))

    def write_seekable_copy(self, out: BinaryIO) -> int:
        """Write a seekable copy of this archive to ``out`` (:mod:`.reframe`), one pass.

        Returns the bytes of tar stream it holds.
        """
        from cdml_edge.archive.tar.reframe import write_seekable_copy

        self._check_open()
        return write_seekable_copy(self._source, self._data_end, self._members.index, out)

    @property
    def engine(self) -> str:  # type: ignore[override]
        """The frame decoder's engine (``"native"`` or ``"python"``)."""
        return str(self._decoder.engine)

    @property
    def frame_cache(self) -> FrameCache:
        """The cache of decoded frames (``max_bytes``, ``hits``, ``misses``)."""
        return self._cache

    def member_name(self, i: int) -> str:
        """The name of member ``i`` (of its header span, :func:`~.frames.header_key`, too)."""
        return self._members.index.names[i if i >= 0 else header_key(i)]

    def _unchecked(self, ids: list[int]) -> list[int]:
        """Members of ``ids`` whose header is still to be checked.

        A span that cannot be a header (not 512 bytes to :data:`_MAX_HEADER_SPAN` before
        the data) is refused.
        """
        if not self._check_headers:  # members found by a walk of their headers
            return []
        x, ok = self._members.index, self._headers_ok
        out = []
        for i in ids:
            if i in ok:
                continue
            span = x.data_offsets[i] - x.header_offsets[i]
            if not tarfmt.BLOCK <= span <= _MAX_HEADER_SPAN or x.header_offsets[i] < 0:
                raise CorruptArchiveError(
                    f"member index: {span} bytes of header before the data at "
                    f"{x.data_offsets[i]}, no tar header",
                    archive=self.name,
                    member=x.names[i],
                )
            out.append(i)
        return out

    def _check_header(self, i: int, span: bytes) -> None:
        """Refuse member ``i`` when its tar header (``span``) is not what the index says.

        The header's name and size must be the index's. A lone header block whose name
        differs is believed only for a name that a pax or long-name record before it holds
        (a copy of another tool's tar.zst indexes the block itself): a name a ustar header
        cannot hold as it is; its size, only for one its size field cannot hold.
        """
        x = self._members.index
        name, size, at = x.names[i], x.sizes[i], x.header_offsets[i]
        if _plain_header_of(span, name, size):
            self._headers_ok.add(i)
            return
        try:
            m = tarfmt.first_entry(span, self.name)
        except ArchiveError as exc:
            raise CorruptArchiveError(
                f"the member index points at no file's tar header at {at} ({exc.reason})",
                archive=self.name,
                member=name,
            ) from None
        lone = m.header_offset == 0  # no meta record in the span
        same = m.name == name or normalize_member_name(m.name) == normalize_member_name(name)
        if not same and lone and span[-tarfmt.BLOCK + 99] != 0:
            # the name field is full: the raw name may be longer (``./`` + 99 characters,
            # ``a//`` + 98), cut there, its whole in a record before the block
            same = _cut_name_of(span[-tarfmt.BLOCK : -tarfmt.BLOCK + 100], name)
        if not same and not (lone and not _ustar_holds(name)):
            raise CorruptArchiveError(
                f"the tar header at {at} names {m.name!r}, not the member index's name",
                archive=self.name,
                member=name,
            )
        if m.size != size and not (lone and size > _MAX_USTAR_SIZE):
            raise CorruptArchiveError(
                f"the tar header at {at} gives {m.size} bytes, the member index {size}",
                archive=self.name,
                member=name,
            )
        self._headers_ok.add(i)

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
            last = self._members[-1]  # its share of the stream, up to where the data ends
            # (a hard link last: its own header ends later than its target's data)
            end = max(last.data_offset + last.size, last.header_offset + tarfmt.BLOCK)
            total_c, total_d = self._data_end, end
            return int(m.size * total_c / total_d)
        f0, f1 = f.frames_for(m.data_offset, m.data_offset + m.size)
        c = f.coff[f1 + 1] - f.coff[f0]
        d = max(f.doff[f1 + 1] - f.doff[f0], 1)
        return int(c * m.size / d)

    def read(self, name: str) -> bytes:
        """The bytes of one member; one in a single frame takes the shortest path."""
        self._check_open()
        i = self._id(name)
        if self._refused or self._sparse:
            return self._read_ids([i])[0]
        if self._frames is not None:
            one = self._read_one(i, self._frames)
            if one is not None:
                return one
        return self._read_ids([i])[0]

    def _read_stored(self, ids: list[int]) -> list[bytes]:
        sizes = self._members.index.sizes
        for i in ids:
            if sizes[i] > self.fast_limit:
                self.check_limits(
                    self.member_name(i), sizes[i], self._compressed_size(i), zstd=True
                )
        if self._frames is None:
            return self._read_streaming(ids)
        heads = self._unchecked(ids)
        batch = plan(self._frames, self._members.index, ids, self, heads)
        got = self._decoder.read(self, self._frames, batch, self._cache)
        for i in heads:
            self._check_header(i, got[header_key(i)])
        return [got[i] for i in ids]

    def _read_one(self, i: int, f: FrameTable) -> bytes | None:
        """A member in one frame, under the limits that need no check.

        From the cache, or one call of the C core. ``None``: :meth:`_read_ids` serves it
        (and words errors).
        """
        x = self._members.index
        off, size = x.data_offsets[i], x.sizes[i]
        if not 0 < size <= self.fast_limit:
            return None
        doff = f.doff
        k = bisect_right(doff, off) - 1
        if k < 0 or k >= f.count or off + size > doff[k + 1]:
            return None
        head = x.header_offsets[i] if self._unchecked([i]) else None
        if head is not None and head < doff[k]:  # the header in a frame before: a batch
            return None
        plain = self._cache.get(k)
        if plain is not None:
            if head is not None:
                self._check_header(i, plain[head - doff[k] : off - doff[k]])
            start = off - doff[k]
            return self._finish(i, plain[start : start + size])
        if self._decoder.engine != "native":
            return None
        if doff[k + 1] - doff[k] > self.fast_limit:
            check_frame(f, k, self, i)
        one = self._decoder.read_one(
            self, f, k, off, size, self._crcs[i], self._cache, whole=head is not None
        )
        if one is None:
            return None
        data, frame = one
        if head is not None:
            if frame is None:
                return None
            self._check_header(i, frame[head - doff[k] : off - doff[k]])
        return data

    @cached_property
    def _cursors(self) -> CursorSlot:
        return CursorSlot(self._source, self._data_end)

    def _read_streaming(self, ids: list[int]) -> list[bytes]:
        """Members of a stream without a seek table, in one pass in tar order.

        The pass continues where the last one stopped when it can (:mod:`.cursor`).
        """
        out: list[bytes] = [b""] * len(ids)
        order = sorted(range(len(ids)), key=lambda k: self._members[ids[k]].data_offset)
        cache: dict[int, bytes] = {}  # by data offset: a member asked twice, a hard link
        first = self._members[ids[order[0]]].data_offset if ids else 0
        with self._cursors.at(first) as cur:
            try:
                for k in order:
                    m = self._members[ids[k]]
                    if m.data_offset not in cache:
                        cur.seek(m.data_offset)
                        cache[m.data_offset] = self._finish(ids[k], cur.read(m.size))
                    out[k] = cache[m.data_offset]
            except EOFError:
                raise TruncatedArchiveError("zstd stream ends early", archive=self.name) from None
            except zstandard.ZstdError as exc:
                head = cur.stream.frame_header()
                raise zstd_error(exc, archive=self.name, header=head) from exc
        return out

    def close(self) -> None:
        """Release the source's handles and the kept decompression stream."""
        self._cursors.drop()
        super().close()
