"""Python face of the C ZIP core.

The index lives in C; batches are read with the GIL off, into fresh ``bytes`` or into an
:class:`~cdml_edge.archive.arena.Arena`.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from cdml_edge.archive._native._reader import ffi, lib
from cdml_edge.archive._native.buffers import fresh_output as _output
from cdml_edge.archive.arena import Arena
from cdml_edge.archive.base import RATIO_FLOOR_BYTES
from cdml_edge.archive.errors import (
    ArchiveError,
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsafeMemberError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.source import ByteSource, FileSource, MemorySource
from cdml_edge.archive.zip import codecs
from cdml_edge.archive.zip.format import (
    CDH,
    FLAG_ENCRYPTED,
    LFH,
    LOCAL_SLACK,
    CentralDirectory,
    Entry,
    decode_name,
    dos_to_epoch,
)
from cdml_edge.archive.zip.read import NAME_MISMATCH, descriptor_message, read_python
from cdml_edge.archive.zstd_frames import HEADER_BYTES, unsupported_reason

_from_buffer = ffi.from_buffer


_MESSAGES = {
    1: (CorruptArchiveError, "bad local header signature"),
    2: (TruncatedArchiveError, "member data cut short"),
    3: (CorruptArchiveError, "compressed data is corrupt"),
    4: (CorruptArchiveError, "size mismatch: data does not hold the declared size"),
    5: (CorruptArchiveError, "CRC-32 mismatch"),
    8: (ArchiveError, "out of memory"),
    11: (CorruptArchiveError, NAME_MISMATCH),
}


# the methods the C core decodes; others go through the Python path
_METHODS = frozenset((codecs.STORED, codecs.DEFLATE, codecs.ZSTD))


def available() -> bool:
    """Always ``True``: this module imports only when the C core is built."""
    return True


def have_zstd() -> bool:
    """Whether the C core was built with libzstd."""
    return bool(lib.cz_have_zstd())


def zstd_version() -> str:
    """``"1.5.4"``: the libzstd the C core was linked with (``""`` without)."""
    v = int(lib.cz_zstd_version())
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v else ""


def zstd_bundled() -> bool:
    """Whether that libzstd was compiled from the bundled sources (not the system's)."""
    return bool(lib.cz_zstd_bundled())


def inflate_backend() -> str:
    """``"libdeflate"`` when the system library was loaded at run time, else ``"zlib"``."""
    return "libdeflate" if lib.cz_inflate_backend() else "zlib"


class ZipIndex:
    """The central directory parsed by C; names decoded in one pass on the Python side."""

    _keep: Any = None  # an unpickled index: the entries and names its cz_index points to

    def __init__(self, cd: CentralDirectory, archive: str) -> None:
        out = ffi.new("cz_index **")
        err = ffi.new("char[]", 256)
        rc = lib.cz_parse(ffi.from_buffer(cd.data), len(cd.data), cd.delta, out, err, 256)
        if rc:
            msg = ffi.string(err).decode("ascii", "replace")
            if rc == 2:
                raise TruncatedArchiveError(msg, archive=archive)
            if rc == 3:
                raise ArchiveError("out of memory parsing the central directory", archive=archive)
            raise CorruptArchiveError(msg, archive=archive)
        self._idx = ffi.gc(out[0], lib.cz_free)
        idx = self._idx
        self._ents = idx.entries
        count = int(idx.count)
        blob = ffi.buffer(idx.names, idx.names_len)[:]
        if count == 0:
            names: list[str] = []
        elif not idx.special_names:
            names = blob[:-1].decode("utf-8", "surrogateescape").split("\x00")
        else:
            names = []
            data = cd.data
            for i in range(count):
                e = self._ents[i]
                raw = blob[e.name_off : e.name_off + e.name_len]
                if e.name_kind == 2:
                    x0 = e.cd_off + CDH.size + e.name_len
                    extra = data[x0 : e.cd_off + CDH.size + e.hdr_extra]
                    names.append(decode_name(raw, e.flags, extra))
                else:
                    names.append(raw.decode("utf-8", "surrogateescape"))
        self.names = names
        self.ndirs = int(idx.ndirs)
        self.count = count

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the entry array's bytes and the raw names (checked on every read)."""
        return (load_index, self.state(with_names=True))

    def state(self, with_names: bool) -> tuple[Any, ...]:
        """What :func:`load_index` rebuilds this index from.

        Without the raw names (``with_names=False``) the receiver supplies them
        (:meth:`use_names`).
        """
        size = int(ffi.sizeof("cz_entry"))
        raw = ffi.buffer(self._ents, size * self.count)[:] if self.count else b""
        return (size, raw, self.count, self.ndirs, self.names_blob() if with_names else None)

    def names_blob(self) -> bytes:
        """The raw names as the C core holds them, each followed by a NUL."""
        idx = self._idx
        return ffi.buffer(idx.names, idx.names_len)[:] if idx.names != ffi.NULL else b""

    def use_names(self, blob: bytes) -> None:
        """Give an unpickled index its raw names (``blob``: as :meth:`names_blob` gives)."""
        keep = ffi.new("char[]", blob) if blob else ffi.NULL
        self._idx.names, self._idx.names_len = keep, len(blob)
        self._keep = (self._keep, keep)

    def check_overlap(self, names: list[str], archive: str) -> None:
        """:func:`~.read.check_overlap` in C: refuse members whose bytes overlap."""
        pair = ffi.new("uint32_t[2]")
        rc = lib.cz_find_overlap(self._idx, pair)
        if rc < 0:
            raise ArchiveError("out of memory checking member spans", archive=archive)
        if rc:
            prev, k = int(pair[0]), int(pair[1])
            raise UnsafeMemberError(
                f"member data overlaps member {names[prev]!r} (offset {self._ents[k].offset})",
                archive=archive,
                member=names[k],
            )

    def spans(self) -> list[tuple[int, int]]:
        """``(local header offset, compressed size)`` of every entry, in directory order."""
        ents = self._ents
        return [(ents[i].offset, ents[i].csize) for i in range(self.count)]

    def raw_name(self, i: int) -> bytes | None:
        """The central-directory bytes of member ``i``'s name (``None``: not held)."""
        if self._idx.names == ffi.NULL:
            return None
        e = self._ents[i]
        return ffi.buffer(self._idx.names + e.name_off, e.name_len)[:]

    def entry(self, i: int, name: str) -> Entry:
        """Member ``i`` as an ``Entry`` tuple, the row the Python path reads."""
        e = self._ents[i]
        mtime = float(e.ut_mtime) if e.ut_mtime != -(1 << 63) else dos_to_epoch(e.dtime, e.ddate)
        return (name, e.offset, e.csize, e.usize, e.crc, e.method, e.flags, mtime, e.hdr_extra)

    def check(self, i: int, names: list[str], owner: Any) -> None:
        """Refuse encrypted / unknown-method / oversized members before reading."""
        self._check_entry(self._ents[i], i, names, owner)

    def _check_entry(self, e: Any, i: int, names: list[str], owner: Any) -> None:
        if (
            e.flags & FLAG_ENCRYPTED
            or e.method not in _METHODS
            or (e.method == codecs.STORED and e.csize != e.usize)
        ):
            owner.check_entry(i, self.entry(i, names[i]))
        if e.usize > owner.max_member_bytes or e.usize > RATIO_FLOOR_BYTES:
            owner.check_limits(names[i], e.usize, e.csize, zstd=e.method == codecs.ZSTD)

    def read_one(self, source: ByteSource, i: int, names: list[str], owner: Any) -> bytes:
        """One member with the least Python overhead; errors go through :meth:`read`."""
        e = self._ents[i]
        size = e.usize
        if e.flags & FLAG_ENCRYPTED or e.method not in _METHODS or size > owner.fast_limit:
            self._check_entry(e, i, names, owner)
        if type(source) is FileSource:
            out, ptr = _output(size)
            st = lib.cz_read_one_fd(self._idx, source.fileno(), source.size(), i, ptr)
        elif type(source) is MemorySource:
            out, ptr = _output(size)
            mem = source.data
            st = lib.cz_read_one_mem(self._idx, _from_buffer(mem), len(mem), i, ptr)
        else:
            return self.read(source, [i], names, owner)[0]
        if st:
            return self.read(source, [i], names, owner)[0]
        return out if type(out) is bytes else bytes(out[:size])

    def read(self, source: ByteSource, ids: list[int], names: list[str], owner: Any) -> list[bytes]:
        """Members ``ids``, each into a fresh ``bytes`` the C core fills in place."""
        ents = self._ents
        for i in ids:
            self.check(i, names, owner)
        sizes = [ents[i].usize for i in ids]
        pairs = [_output(s) for s in sizes]  # one result object per member, filled by C
        result: list[Any] = [p[0] for p in pairs]
        bad, status, aux = self._run(source, ids, ffi.new("uint8_t *[]", [p[1] for p in pairs]))
        for k in range(len(ids)):
            if type(result[k]) is not bytes:
                result[k] = bytes(result[k][: sizes[k]])
        if bad:
            for k, data in self._settle(source, ids, names, owner, status, aux):
                result[k] = data
        return result

    def read_into(
        self, source: ByteSource, ids: list[int], names: list[str], owner: Any, arena: Arena
    ) -> list[memoryview]:
        """Members ``ids`` decompressed by the C core straight into ``arena`` (GIL released).

        Views valid until the arena's next batch; CRC checked as by :meth:`read`.
        """
        ents = self._ents
        for i in ids:
            self.check(i, names, owner)
        sizes = [ents[i].usize for i in ids]
        placed = arena.layout(sizes)
        if placed is None:  # over the arena's bound: fresh bytes
            return [memoryview(b) for b in self.read(source, ids, names, owner)]
        buf, offs = placed
        base = _from_buffer("uint8_t[]", buf, require_writable=True)
        bad, status, aux = self._run(source, ids, ffi.new("uint8_t *[]", [base + o for o in offs]))
        if bad:
            for k, data in self._settle(source, ids, names, owner, status, aux):
                buf[offs[k] : offs[k] + sizes[k]] = data
        return arena.views(buf, offs, sizes)

    def _run(self, source: ByteSource, ids: list[int], outs: Any) -> tuple[int, Any, Any]:
        """One C call reading members ``ids`` into ``outs``: (failures, status, aux)."""
        n = len(ids)
        c_ids = ffi.new("uint32_t[]", ids)
        status = ffi.new("int32_t[]", n)
        aux = ffi.new("uint64_t[]", n)
        fd = source.fileno() if isinstance(source, FileSource) else None
        if fd is not None:
            bad = lib.cz_read_fd(self._idx, fd, source.size(), c_ids, n, outs, status, aux)
        elif isinstance(source, MemorySource):
            mem = source.data
            bad = lib.cz_read_mem(
                self._idx, ffi.from_buffer(mem), len(mem), c_ids, n, outs, status, aux
            )
        else:
            bad = self._read_remote(source, ids, n, outs, c_ids, status, aux)
        return int(bad), status, aux

    def _settle(
        self,
        source: ByteSource,
        ids: list[int],
        names: list[str],
        owner: Any,
        status: Any,
        aux: Any,
    ) -> list[tuple[int, bytes]]:
        """After a call with failures: ``(position, bytes)`` of members the Python path reads.

        Those are members with a method the C core does not do, or a long local extra;
        raises for the first member that is broken.
        """
        ents = self._ents
        redo: list[tuple[int, bytes]] = []
        for k, i in enumerate(ids):
            st = status[k]
            if st == 0:
                continue
            if st == 6:
                entry, raw = self.entry(i, names[i]), self.raw_name(i)
                redo.append((k, read_python(source, [entry], owner.name, [raw])[0]))
                continue
            if st == 7:
                code = int(aux[k])
                raise ArchiveError(
                    f"read error: {os.strerror(code) if code else errno.errorcode.get(code)}",
                    archive=owner.name,
                    member=names[i],
                )
            cls, msg = _MESSAGES.get(st, (CorruptArchiveError, f"status {st}"))
            if st == 5:
                msg = f"CRC-32 mismatch: stored {ents[i].crc:08x}, data {int(aux[k]):08x}"
            if st == 10:
                msg = descriptor_message(int(aux[k]), ents[i].crc)
            if st == 3:
                msg = f"{codecs.method_name(ents[i].method)} data is corrupt"
                why = _unsupported_zstd(source, ents[i]) if ents[i].method == codecs.ZSTD else None
                if why is not None:  # a frame libzstd will not decode, as the Python path says
                    cls, msg = UnsupportedArchiveError, why
            raise cls(msg, archive=owner.name, member=names[i])
        return redo

    def _read_remote(
        self,
        source: ByteSource,
        ids: list[int],
        n: int,
        outs: Any,
        c_ids: Any,
        status: Any,
        aux: Any,
    ) -> int:
        """Any other source: one ``pread_many`` (sorted by offset), then decode in C."""
        ents = self._ents
        size = source.size()
        ranges = []
        for i in ids:
            e = ents[i]
            off = e.offset
            want = LFH.size + e.hdr_extra + e.csize + LOCAL_SLACK
            ranges.append((off, max(0, min(size - off, want))))
        order = sorted(range(n), key=lambda k: ranges[k][0])
        got = source.pread_many([ranges[k] for k in order]) if n > 1 else [source.pread(*ranges[0])]
        bufs: list[bytes] = [b""] * n
        for k, b in zip(order, got, strict=True):
            bufs[k] = b
        keep = [ffi.from_buffer(b) for b in bufs]
        ptrs = ffi.new("uint8_t *[]", keep)
        lens = ffi.new("uint64_t[]", [len(b) for b in bufs])
        return int(lib.cz_read_bufs(self._idx, ptrs, lens, c_ids, n, outs, status, aux))


def load_index(
    size: int, raw: bytes, count: int, ndirs: int, names: bytes | None = b""
) -> ZipIndex | None:
    """A :class:`ZipIndex` over a pickled entry array (and its raw names, when sent).

    ``None`` when this build's entry layout differs: the archive is then opened from its
    source again.
    """
    if size != ffi.sizeof("cz_entry") or len(raw) != size * count:
        return None
    idx = ffi.new("cz_index *")
    ents = ffi.new("cz_entry[]", max(count, 1))
    ffi.memmove(ents, raw, len(raw))
    idx.entries, idx.count, idx.ndirs = ents, count, ndirs
    self = ZipIndex.__new__(ZipIndex)
    self._keep = ents  # owns the entries idx points to
    self._idx, self._ents = idx, ents
    self.names, self.ndirs, self.count = [], ndirs, count
    if names:
        self.use_names(names)
    return self


def _unsupported_zstd(source: ByteSource, e: Any) -> str | None:
    """Why the zstd member of entry ``e`` cannot be decoded here (a dictionary, a large window)."""
    try:
        local = source.pread(e.offset, LFH.size)
        if len(local) < LFH.size:
            return None
        start = e.offset + LFH.size + int.from_bytes(local[26:28], "little")
        start += int.from_bytes(local[28:30], "little")
        return unsupported_reason(source.pread(start, HEADER_BYTES))
    except (OSError, ValueError):
        return None
