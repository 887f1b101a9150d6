"""Python face of the C core's plain copy of a tar.zst made by other tools.

``cz_tar_plain_copy`` decompresses the frames of a local file into the copy and walks, on
the way and with the GIL released, the headers that need no judgement (ustar / GNU headers
of regular files, folders, links, devices and FIFOs with plain octal fields; the last three
are skipped, as the Python walk skips them). The headers from the first one it does not
walk (a long name, a pax record, a sparse file, a bad checksum, the end of the archive)
are walked by :func:`~.format.scan` over the copy, from where it stopped. Whether a stream
is worth a plain copy is judged by the caller's probe before, and here on the totals after.
A failed decompression, read or write hands the whole copy to the Python path
(:func:`~.reframe.write_plain_copy`), which makes its own error of it: the results are the
Python path's, member for member.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from cdml_edge.archive._native._reader import ffi, lib
from cdml_edge.archive.base import DEFAULT_MAX_MEMBERS
from cdml_edge.archive.errors import TooManyMembersError
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.expansion import ExpansionLimit
from cdml_edge.archive.tar.members import columns, member_list
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.seekable import MemberIndex
from cdml_edge.archive.tar.stream import PreadScanner

_ROW = int(lib.CZ_TAR_ROW)
_LINKED = frozenset(b"12346")  # the type flags of the rows of links, devices and FIFOs
_HARD_LINK = tarfmt.HARD_LINK[0]
_MAX_OFFSET = (1 << 63) - 1


def serves(source: object, end: int, out: BinaryIO) -> bool:
    """Whether :func:`plain_copy` can write this copy: a local file into an empty file.

    ``out`` must be a regular file, empty, open for reading and writing without append
    (the walk reads back what was written); ``end`` a size a file can have.
    """
    return _local(source, end) and _empty_file(out) is not None


def _local(source: object, end: int) -> bool:
    """Whether the C core reads ``source`` itself: a local file, ``end`` a size it can have."""
    return type(source) is FileSource and 0 <= end <= _MAX_OFFSET


@contextlib.contextmanager
def _walked(
    in_fd: int, end: int, out_fd: int, max_rows: int, limit: ExpansionLimit | None
) -> Iterator[tuple[int, Any]]:
    """``cz_tar_plain_copy``'s status and walk (freed after the block); ``out_fd`` -1: no copy.

    The walk stops at an entry past ``max_rows`` (the caller's walk refuses it there); all
    stops past ``limit`` (``CZ_EXPANDS``).
    """
    found = ffi.new("cz_tar_walk **")
    ratio, floor = (limit.ratio, limit.floor) if limit is not None else (0.0, 0)
    status = lib.cz_tar_plain_copy(in_fd, end, out_fd, max(max_rows, 0), ratio, floor, found)
    try:
        yield status, found[0]
    finally:
        lib.cz_tar_walk_free(found[0])


def plain_copy(
    source: Any,
    end: int,
    out: BinaryIO,
    max_ratio: float,
    max_members: int = DEFAULT_MAX_MEMBERS,
    limit: ExpansionLimit | None = None,
) -> TarRows | bool | None:
    """The plain copy of ``source`` written to ``out`` by the C core; ``None``: not served.

    For what :func:`serves`, after the caller's probe judged the stream's first bytes.
    ``False`` when the whole stream shrinks by more than ``max_ratio``, or as soon as it is
    past ``limit`` (written no further). ``out`` is left at its end; not served (``out`` left
    empty): any error on the way. More than ``max_members`` entries:
    :class:`~cdml_edge.archive.errors.TooManyMembersError`.
    """
    if not serves(source, end, out):
        return None
    out_fd, in_fd = out.fileno(), source.fileno()
    if in_fd is None:
        return None
    with _walked(in_fd, end, out_fd, max_members, limit) as (status, walk):
        if status == lib.CZ_EXPANDS:  # a bomb: no copy, and the open's walk says why
            out.seek(0)
            with contextlib.suppress(OSError):
                out.truncate()
            return False
        total = walk.stream_bytes if status == lib.CZ_OK else -1  # OK: a walk was made
        if total < 0 or os.fstat(out_fd).st_size != total:
            out.seek(0)
            with contextlib.suppress(OSError):
                out.truncate()
            return None
        out.seek(0, os.SEEK_END)
        fast = _walked_index(walk)
        members, skipped = ([], {}) if fast is not None else _entries(walk)
        resume, taken, counted = walk.resume_at, walk.compressed_read, int(walk.count)
    rest, rest_skipped = _walk_from(source.name, out_fd, resume, total, max_members, counted)
    if total > max_ratio * max(taken, 1):
        return False
    if fast is not None and not rest and not rest_skipped:  # the C core walked it all
        return TarRows.build(fast, skipped={})
    if fast is not None:  # the Python walk went on: a link there may name a file before it
        members = _members_of(fast)
    skipped.update(rest_skipped)  # as one walk's dict: a name seen again keeps its place
    return TarRows.build(columns(members + rest, skipped), skipped=skipped)


def walked_members(
    source: Any,
    end: int,
    max_members: int = DEFAULT_MAX_MEMBERS,
    limit: ExpansionLimit | None = None,
) -> tuple[MemberIndex, dict[str, str]] | None:
    """The members (links served) and skipped entries of the tar.zst ``source``, C-walked.

    ``end``: where its zstd data ends. More than ``max_members`` entries:
    :class:`~cdml_edge.archive.errors.TooManyMembersError`; a stream past ``limit``:
    :class:`~cdml_edge.archive.errors.StreamTooLargeError`.

    The pass a tar.zst without frames to seek to needs at open, nothing written. ``None``
    (the Python walk serves) unless the C core walked every header to a clean end: an
    end-of-archive block, or the end of the stream on a header boundary; any other header
    (a long name, a pax record, a sparse file), a cut or corrupt stream, another source.
    """
    in_fd = source.fileno() if _local(source, end) else None
    if in_fd is None:
        return None
    with _walked(in_fd, end, -1, max_members, limit) as (status, walk):
        if walk and walk.over:  # an entry past the limit: refused without a second walk
            raise TooManyMembersError.of(source.name, max_members, f"more than {max_members:,}")
        if status == lib.CZ_EXPANDS and limit is not None:
            raise limit.error(int(walk.compressed_read), int(walk.stream_bytes))
        if status != lib.CZ_OK or not walk.resume_at:  # an empty stream: Python's error
            return None
        clean = walk.at_end or walk.resume_at == walk.stream_bytes
        if not clean:
            return None
        fast = _walked_index(walk)
        if fast is not None:
            return fast, {}
        members, skipped = _entries(walk)
        return columns(members, skipped), skipped


def _empty_file(out: BinaryIO) -> int | None:
    """``out``'s descriptor when it is an empty regular file, read-write, no append.

    Read-write as a descriptor and writable as a file object (``os.fdopen(fd, "rb")`` is not).
    """
    try:
        fd = out.fileno()
        out.flush()
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        st = os.fstat(fd)
    except (AttributeError, OSError, ValueError):
        return None
    if flags & os.O_ACCMODE != os.O_RDWR or flags & os.O_APPEND:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size or out.tell() or not out.writable():
        return None
    return fd


def _walked_index(walk: Any) -> MemberIndex | None:
    """The C core's rows as columns, built without a member object per row.

    ``None`` when a row is a link, device or FIFO (:func:`_entries` serves those). A walk
    of a million entries: 0.4 s instead of 4.9 s in objects.
    """
    n = int(walk.count)
    if not n:
        return MemberIndex([], [], [], [], [], [])
    rows = memoryview(ffi.buffer(walk.rows, n * _ROW * 8)).cast("q")  # int64_t, row-major
    if not _LINKED.isdisjoint(rows[5::_ROW].tolist()):
        return None
    blob = ffi.buffer(walk.names, walk.names_len)[:]
    spans = zip(rows[3::_ROW].tolist(), rows[4::_ROW].tolist(), strict=True)
    names = [blob[o : o + k].decode("utf-8", "surrogateescape") for o, k in spans]
    heads = rows[0::_ROW].tolist()
    return MemberIndex(
        names,
        heads,
        [h + tarfmt.BLOCK for h in heads],
        rows[1::_ROW].tolist(),
        [float(t) for t in rows[2::_ROW].tolist()],
        [None] * n,
    )


def _members_of(index: MemberIndex) -> list[tarfmt.TarMember]:
    """``index``'s rows as members again (a walk the Python path went on with)."""
    return [
        tarfmt.TarMember(r.name, r.header_offset, r.data_offset, r.size, r.mtime) for r in index
    ]


def _entries(walk: Any) -> tuple[list[tarfmt.TarMember], dict[str, str]]:
    """The members the C core walked and the entries it skipped, as the Python walk has them."""
    n = int(walk.count)
    members: list[tarfmt.TarMember] = []
    skipped: dict[str, str] = {}
    if not n:
        return members, skipped
    rows = ffi.unpack(walk.rows, n * _ROW)
    names = ffi.buffer(walk.names, walk.names_len)[:]
    for k in range(0, n * _ROW, _ROW):
        at, size, mtime, off, length, kind, link = rows[k : k + _ROW]
        name = names[off : off + length].decode("utf-8", "surrogateescape")
        if kind in _LINKED:
            target = names[off + length : off + length + link].decode("utf-8", "surrogateescape")
            if kind == _HARD_LINK:  # served as its target once the walk is done, as in Python
                members.append(tarfmt.TarMember(name, at, at + tarfmt.BLOCK, 0, 0.0, link=target))
            else:  # a symbolic link, device or FIFO, in the order of the walk
                skipped[name] = tarfmt.skip_reason(bytes((kind,)), target)
            continue
        members.append(tarfmt.TarMember(name, at, at + tarfmt.BLOCK, size, float(mtime)))
    return members, skipped


class _Copy:
    """``pread`` on the copy's descriptor, the one read :class:`PreadScanner` makes.

    Nothing past its ``size`` bytes: a walk that skipped past the end (a member's size far
    beyond it) reads the end there, as the Python path's walk does.
    """

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size

    def pread(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset``."""
        if offset >= self._size:
            return b""
        return os.pread(self._fd, min(n, self._size - offset), offset)


def _walk_from(
    archive: str, fd: int, start: int, size: int, max_members: int, counted: int
) -> tuple[list[tarfmt.TarMember], dict[str, str]]:
    """The Python walk of the copy (``size`` bytes on ``fd``) from the header at ``start``.

    ``counted``: the entries the C core walked before it (held to ``max_members`` with them).
    """
    scanner = PreadScanner(_Copy(fd, size))  # type: ignore[arg-type]
    scanner.skip(start)
    return member_list(
        archive,
        lambda cb, sk: tarfmt.scan(scanner.read, scanner.skip, archive, cb, sk, start=start),
        max_members=max_members,
        counted=counted,
    )
