"""Python face of the C core's tar.zst path: frames decoded by libzstd with the GIL released.

One call decodes every frame a batch needs once and cuts each member out of its frames
(``cz_zstd_read``, fed flat arrays so that building a call costs little Python); a member
in one frame takes a call with scalars only (``cz_zstd_read_one``). A local file is read by
the C core itself (``pread``), memory in place, any other source (S3, file objects) with
one ``pread_many`` first. Results and errors are those of :class:`~.frames.PythonFrames`,
which serves when a status asks for it.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from cdml_edge.archive._native._reader import ffi, lib
from cdml_edge.archive._native.buffers import fresh_output
from cdml_edge.archive.errors import (
    ArchiveError,
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.source import FileSource, MemorySource
from cdml_edge.archive.tar.cache import FrameCache
from cdml_edge.archive.tar.frames import (
    SPARE_BYTES,
    FrameBatch,
    PythonFrames,
    Reading,
    crc_error,
    fetch,
)
from cdml_edge.archive.tar.seekable import FrameTable
from cdml_edge.archive.zstd_frames import HEADER_BYTES, unsupported_reason

_NULL = ffi.NULL
_from_buffer = ffi.from_buffer
_new = ffi.new
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
        self,
        arc: Reading,
        table: FrameTable,
        k: int,
        off: int,
        size: int,
        crc: int | None,
        cache: FrameCache,
        whole: bool = False,
    ) -> tuple[bytes, bytes | None] | None:
        """The member of ``size`` bytes at ``off`` in frame ``k`` (not in the cache).

        Read from a file or memory; ``None`` when :meth:`read` must serve it (other
        sources, or an error it words). Returns the member and the decoded frame, which
        is there when the cache wants it or ``whole`` asks for it.
        """
        fd, mem, mem_len = _where(arc.source)
        if fd < 0 and mem is _NULL:
            return None
        doff, coff = table.doff, table.coff
        dsize = doff[k + 1] - doff[k]
        frame = None
        keep = cache.wants(dsize) and dsize - size > SPARE_BYTES  # others live in this frame
        if keep or whole:
            frame = bytes(dsize)
        out, ptr = fresh_output(size)
        st = lib.cz_zstd_read_one(
            fd, mem, mem_len, coff[k], coff[k + 1] - coff[k], doff[k], dsize,
            _NULL if frame is None else _from_buffer("uint8_t[]", frame),
            off, size, crc or 0, crc is not None, ptr, _NULL,
        )  # fmt: skip
        if st != OK:
            return None
        if keep and frame is not None:
            cache.put(k, frame)
        return (out if type(out) is bytes else bytes(out[:size])), frame

    def read(
        self, arc: Reading, table: FrameTable, batch: FrameBatch, cache: FrameCache
    ) -> dict[int, bytes]:
        """The bytes of every member of ``batch``, by member id."""
        frames = batch.frames
        got: dict[int, bytes] = {}
        js = [j for j, size in enumerate(batch.sizes) if size]  # members with bytes to cut
        for j, size in enumerate(batch.sizes):
            if not size:
                got[batch.members[j]] = b""
        if not js:
            return got
        c_frames, keep, decoded = self._frames(arc, table, batch, cache)
        pos = {k: j for j, k in enumerate(frames)}
        rows: list[int] = []
        results: list[Any] = []
        ptrs = []
        offs, sizes, crcs, f0, f1 = batch.offs, batch.sizes, batch.crcs, batch.f0, batch.f1
        for j in js:
            out, ptr = fresh_output(sizes[j])
            results.append(out)
            ptrs.append(ptr)
            crc = crcs[j]
            rows += (offs[j], sizes[j], pos[f0[j]], pos[f1[j]], crc or 0, crc is not None)
        n, m = len(frames), len(js)
        fstatus, ferr = _new("int32_t[]", n), _new("uint64_t[]", n)
        status, aux = _new("int32_t[]", m), _new("uint64_t[]", m)
        fd, mem, mem_len = _where(arc.source)
        bad = lib.cz_zstd_read(
            fd, mem, mem_len, c_frames[0], n, c_frames[1], c_frames[2], c_frames[3],
            fstatus, ferr, _new("uint64_t[]", rows), m, _new("uint8_t *[]", ptrs), status, aux,
        )  # fmt: skip
        del keep  # the buffers the C core read from
        for j, frame in decoded.items():
            if fstatus[j] == OK:
                cache.put(frames[j], frame)
        if bad:
            if any(status[x] == PYTHON for x in range(m)):
                return self._python.read(arc, table, batch, cache)
            x = next(x for x in range(m) if status[x] != OK)
            self._raise(arc, table, batch, js[x], int(status[x]), int(aux[x]), ferr)
        for j, out in zip(js, results, strict=True):
            got[batch.members[j]] = out if type(out) is bytes else bytes(out[: sizes[j]])
        return got

    @staticmethod
    def _frames(
        arc: Reading, table: FrameTable, batch: FrameBatch, cache: FrameCache
    ) -> tuple[tuple[Any, Any, Any, Any], list[Any], dict[int, bytes]]:
        """The frame arrays of ``cz_zstd_read`` (rows, src, dst, plain).

        Cached frames as they are, a buffer to decode into for those worth keeping, and the
        compressed bytes of the rest when the source is neither a file nor memory.
        """
        coff, doff = table.coff, table.doff
        n = len(batch.frames)
        rows: list[int] = []
        src, dst, plain = [_NULL] * n, [_NULL] * n, [_NULL] * n
        keep: list[Any] = []
        decoded: dict[int, bytes] = {}
        fetch_these = []
        wanted = batch.keep(table, cache)
        for j, k in enumerate(batch.frames):
            rows += (coff[k], coff[k + 1] - coff[k], doff[k], doff[k + 1] - doff[k], 0)
            got = cache.get(k)
            if got is not None:
                keep.append(got)
                plain[j] = _from_buffer("uint8_t[]", got)
                continue
            if k in wanted:
                decoded[j] = bytes(doff[k + 1] - doff[k])
                dst[j] = _from_buffer("uint8_t[]", decoded[j])
            fetch_these.append(j)
        fd, mem, _ = _where(arc.source)
        if fetch_these and fd < 0 and mem is _NULL:
            raw = fetch(arc.source, table, [batch.frames[j] for j in fetch_these])
            for j in fetch_these:
                buf = raw[batch.frames[j]]
                keep.append(buf)
                src[j] = _from_buffer("uint8_t[]", buf)
                rows[5 * j + 4] = len(buf)
        arrays = (
            _new("uint64_t[]", rows or [0]),
            _new("uint8_t *[]", src or [_NULL]),
            _new("uint8_t *[]", dst or [_NULL]),
            _new("uint8_t *[]", plain or [_NULL]),
        )
        return arrays, keep, decoded

    @staticmethod
    def _raise(
        arc: Reading, table: FrameTable, batch: FrameBatch, j: int, st: int, x: int, ferr: Any
    ) -> None:
        """Raise for member ``j`` of ``batch`` as the Python path words it.

        ``st``: the member's status from the C core, ``x``: its aux value.
        """
        i = batch.members[j]
        member = arc.member_name(i)
        if st == CRC:
            raise crc_error(batch.crcs[j] or 0, x, arc, i)
        if st == BAD_SPAN:
            raise CorruptArchiveError(
                "member lies beyond the frames of the seek table", archive=arc.name, member=member
            )
        k = batch.frames[x] if x < len(batch.frames) else -1
        dsize = table.doff[k + 1] - table.doff[k] if k >= 0 else 0
        if st == IO:
            code = int(ferr[x])
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
        # the C core says only that libzstd failed: the frame's header tells a frame it
        # cannot decode (a dictionary, too large a window) from corrupt data, as the Python
        # path (:func:`~cdml_edge.archive.zstd_frames.zstd_error`) does
        unsupported = unsupported_reason(_frame_header(arc, table, k)) if k >= 0 else None
        if unsupported is not None:
            raise UnsupportedArchiveError(unsupported, archive=arc.name, member=member)
        raise CorruptArchiveError(f"zstd frame {k}: corrupt data", archive=arc.name, member=member)


def _frame_header(arc: Reading, table: FrameTable, k: int) -> bytes | None:
    """The header of frame ``k`` (``None`` when it cannot be read)."""
    try:
        return arc.source.pread(table.coff[k], HEADER_BYTES)
    except (OSError, ValueError):
        return None
