"""Python face of the C core's tar.zst path: frames decoded by libzstd with the GIL released.

One call decodes every frame a batch needs once and cuts each member out of its frames
(``cz_zstd_read``); a member in one frame takes a call with scalars only
(``cz_zstd_read_one``). A local file is read by the C core itself (``pread``), memory in
place, any other source (S3, file objects) with one ``pread_many`` first. Results are
identical to :class:`~.frames.PythonFrames`, which serves when a status asks for it.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from cdml_edge.archive._native._reader import ffi, lib  # type: ignore[import-not-found]
from cdml_edge.archive._native.buffers import fresh_output
from cdml_edge.archive.errors import ArchiveError, CorruptArchiveError, TruncatedArchiveError
from cdml_edge.archive.source import FileSource, MemorySource
from cdml_edge.archive.tar.cache import FrameCache
from cdml_edge.archive.tar.frames import (
    Batch,
    PythonFrames,
    Reading,
    Span,
    crc_error,
    fetch,
    worth_keeping,
)
from cdml_edge.archive.tar.seekable import FrameTable

_NULL = ffi.NULL
_from_buffer = ffi.from_buffer
OK, TRUNCATED, DATA, SIZE, CRC, PYTHON, IO, MEMORY, BAD_SPAN = 0, 2, 3, 4, 5, 6, 7, 8, 9


def available() -> bool:
    """True when the C core was built with libzstd."""
    return bool(lib.cz_have_zstd())


def _where(source: Any) -> tuple[int, Any, int]:
    """``(fd, mem, mem_len)`` the C core reads from; ``(-1, NULL, 0)``: the caller fetches."""
    if type(source) is FileSource:
        fd = source.fileno()
        return (-1 if fd is None else fd), _NULL, 0
    if type(source) is MemorySource and source.size():
        return -1, _from_buffer(source.data), source.size()
    return -1, _NULL, 0


class NativeFrames:
    """tar.zst frames decoded by the C core."""

    engine = "native"

    def __init__(self) -> None:
        self._python = PythonFrames()

    def read_one(
        self, arc: Reading, table: FrameTable, s: Span, cache: FrameCache
    ) -> bytes | None:
        """Member ``s`` lying in one frame not in the cache; ``None``: use :meth:`read`."""
        k = s.f0
        fd, mem, mem_len = _where(arc.source)
        if fd < 0 and mem is _NULL:
            return None
        dsize = table.doff[k + 1] - table.doff[k]
        frame = bytes(dsize) if worth_keeping(table, k, s, cache) else None
        dst = _from_buffer("uint8_t[]", frame) if frame is not None else _NULL
        out, ptr = fresh_output(s.size)
        aux = ffi.new("uint64_t *")
        coff = table.coff[k]
        st = lib.cz_zstd_read_one(
            fd, mem, mem_len, coff, table.coff[k + 1] - coff, table.doff[k], dsize, dst,
            s.off, s.size, s.crc or 0, s.crc is not None, ptr, aux,
        )  # fmt: skip
        if st != OK:
            return None  # the batch path says why (or decodes in Python)
        if frame is not None:
            cache.put(k, frame)
        return out if type(out) is bytes else bytes(out[: s.size])

    def read(
        self, arc: Reading, table: FrameTable, batch: Batch, cache: FrameCache
    ) -> dict[int, bytes]:
        """The bytes of every member of ``batch``, by member id."""
        spans = [s for s in batch.spans if s.size]
        result: dict[int, bytes] = {s.member: b"" for s in batch.spans if not s.size}
        if not spans:
            return result
        frames, keep, decoded = self._frames(arc, table, batch, cache)
        pos = {k: j for j, k in enumerate(batch.frames)}
        c_spans = ffi.new("cz_span[]", len(spans))
        outs = []
        for c, s in zip(c_spans, spans, strict=True):
            out, ptr = fresh_output(s.size)
            outs.append(out)
            c.off, c.size, c.f0, c.f1, c.out = s.off, s.size, pos[s.f0], pos[s.f1], ptr
            c.crc, c.check_crc = s.crc or 0, s.crc is not None
        status = ffi.new("int32_t[]", len(spans))
        aux = ffi.new("uint64_t[]", len(spans))
        fd, mem, mem_len = _where(arc.source)
        n = len(batch.frames)
        bad = lib.cz_zstd_read(fd, mem, mem_len, frames, n, c_spans, len(spans), status, aux)
        del keep  # the buffers the C core read from
        for j, frame in decoded.items():
            if frames[j].status == OK:
                cache.put(batch.frames[j], frame)
        if bad:
            if any(status[j] == PYTHON for j in range(len(spans))):
                return self._python.read(arc, table, batch, cache)
            self._raise(arc, table, batch, spans, frames, status, aux)
        for s, out in zip(spans, outs, strict=True):
            result[s.member] = out if type(out) is bytes else bytes(out[: s.size])
        return result

    @staticmethod
    def _frames(
        arc: Reading, table: FrameTable, batch: Batch, cache: FrameCache
    ) -> tuple[Any, list[Any], dict[int, bytes]]:
        """The ``cz_frame`` array: cached frames as they are, the cacheable ones with a
        buffer to decode into, the compressed bytes of all the rest when the caller reads."""
        frames = ffi.new("cz_frame[]", len(batch.frames))
        keep: list[Any] = []
        decoded: dict[int, bytes] = {}
        fetch_these = []
        wanted = batch.keep(table, cache)
        for j, (f, k) in enumerate(zip(frames, batch.frames, strict=True)):
            f.coff, f.csize = table.coff[k], table.coff[k + 1] - table.coff[k]
            f.doff, f.dsize = table.doff[k], table.doff[k + 1] - table.doff[k]
            plain = cache.get(k)
            if plain is not None:
                keep.append(plain)
                f.plain = _from_buffer("uint8_t[]", plain)
                continue
            if k in wanted:
                decoded[j] = bytes(f.dsize)
                f.dst = _from_buffer("uint8_t[]", decoded[j])
            fetch_these.append(j)
        fd, mem, _ = _where(arc.source)
        if fetch_these and fd < 0 and mem is _NULL:
            raw = fetch(arc.source, table, [batch.frames[j] for j in fetch_these])
            for j in fetch_these:
                buf = raw[batch.frames[j]]
                keep.append(buf)
                frames[j].src, frames[j].src_len = _from_buffer("uint8_t[]", buf), len(buf)
        return frames, keep, decoded

    @staticmethod
    def _raise(
        arc: Reading, table: FrameTable, batch: Batch, spans: list[Span], frames: Any,
        status: Any, aux: Any,
    ) -> None:  # fmt: skip
        """Raise for the first member that failed, as the Python path words it."""
        j = next(j for j in range(len(spans)) if status[j] != OK)
        s, st, x = spans[j], int(status[j]), int(aux[j])
        member = arc.member_name(s.member)
        if st == CRC:
            raise crc_error(s.crc or 0, x, arc, s.member)
        if st == BAD_SPAN:
            raise CorruptArchiveError(
                "member lies beyond the frames of the seek table", archive=arc.name, member=member
            )
        k = batch.frames[x] if x < len(batch.frames) else -1
        dsize = table.doff[k + 1] - table.doff[k] if k >= 0 else 0
        if st == IO:
            code = int(frames[x].err)
            why = os.strerror(code) if code else errno.errorcode.get(code, "?")
            raise ArchiveError(f"read error: {why}", archive=arc.name, member=member)
        if st == MEMORY:
            raise ArchiveError("out of memory", archive=arc.name, member=member)
        if st == TRUNCATED:
            why = f"zstd frame {k} cut short"
            raise TruncatedArchiveError(why, archive=arc.name, member=member)
        if st == SIZE:
            why = f"zstd frame {k} does not hold the {dsize} bytes the seek table says"
            raise CorruptArchiveError(why, archive=arc.name, member=member)
        raise CorruptArchiveError(f"zstd frame {k}: corrupt data", archive=arc.name, member=member)
