"""Python face of the C core's plain copy of a tar.zst made by other tools.

``cz_tar_plain_copy`` decompresses the frames of a local file into the copy and walks, on
the way and with the GIL released, the headers that need no judgement (ustar / GNU headers
of regular files and folders with plain octal fields). The headers from the first one it
does not walk (a long name, a pax record, a link, a bad checksum, the end of the archive)
are walked by :func:`~.format.scan` over the copy, from where it stopped. A failed
decompression, read or write hands the whole copy to the Python path
(:func:`~.reframe.write_plain_copy`), which makes its own error of it: the results are the
Python path's, member for member.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import BinaryIO

from cdml_edge.archive._native._reader import ffi, lib
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.members import columns, member_list
from cdml_edge.archive.tar.rows import TarRows
from cdml_edge.archive.tar.stream import PreadScanner

_ROW = int(lib.CZ_TAR_ROW)


def plain_copy(
    source: object, end: int, out: BinaryIO, probe_bytes: int, max_ratio: float
) -> TarRows | bool | None:
    """The plain copy of ``source`` written to ``out`` by the C core; ``None``: not served.

    ``False`` when the stream shrinks by more than ``max_ratio`` (after ``probe_bytes`` of it,
    or at its end), as the Python path says it. Served: a local file (:class:`FileSource`)
    into a file at its start that can be read back; ``out`` is left at its end. Not served
    (``out`` left empty): another source or file, or any error on the way.
    """
    out_fd = _writable_at_start(out)
    if out_fd is None or type(source) is not FileSource:
        return None
    in_fd = source.fileno()
    if in_fd is None:
        return None
    found = ffi.new("cz_tar_walk **")
    status = lib.cz_tar_plain_copy(in_fd, end, out_fd, probe_bytes, max_ratio, found)
    walk = found[0]
    try:
        if status == lib.CZ_COMPRESSIBLE:
            out.seek(0, os.SEEK_END)
            return False
        if status != lib.CZ_OK:
            out.seek(0)
            with contextlib.suppress(OSError):  # a device (a full disk's test double) cannot
                out.truncate()
            return None
        out.seek(0, os.SEEK_END)
        members = _members(walk)
        resume, total, taken = walk.resume_at, walk.stream_bytes, walk.compressed_read
    finally:
        lib.cz_tar_walk_free(walk)
    shrinks = total > max_ratio * max(taken, 1)
    if shrinks and total < probe_bytes:  # the probe judged the whole stream, before any walk
        return False
    rest, skipped = _walk_from(source.name, out_fd, resume)
    if shrinks:
        return False
    return TarRows.build(columns(members + rest), skipped=skipped)


def _writable_at_start(out: BinaryIO) -> int | None:
    """``out``'s descriptor when it is a file at offset 0 open for reading too; else ``None``."""
    try:
        fd = out.fileno()
        out.flush()
        if out.tell() != 0 or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDWR:
            return None
    except (AttributeError, OSError, ValueError):
        return None
    return fd


def _members(walk: object) -> list[tarfmt.TarMember]:
    """The members the C core walked, as the Python walk makes them."""
    n = int(walk.count)  # type: ignore[attr-defined]
    if not n:
        return []
    rows = ffi.unpack(walk.rows, n * _ROW)  # type: ignore[attr-defined]
    names = ffi.buffer(walk.names, walk.names_len)[:]  # type: ignore[attr-defined]
    out = []
    for k in range(0, n * _ROW, _ROW):
        at, size, mtime, off, length = rows[k : k + _ROW]
        name = names[off : off + length].decode("utf-8", "surrogateescape")
        out.append(tarfmt.TarMember(name, at, at + tarfmt.BLOCK, size, float(mtime)))
    return out


class _Descriptor:
    """``pread`` on an open descriptor, the one read :class:`PreadScanner` makes."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def pread(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset``."""
        return os.pread(self._fd, n, offset)


def _walk_from(archive: str, fd: int, start: int) -> tuple[list[tarfmt.TarMember], dict[str, str]]:
    """The Python walk of the copy on ``fd`` from the header at ``start`` to its end."""
    scanner = PreadScanner(_Descriptor(fd))  # type: ignore[arg-type]
    scanner.skip(start)
    return member_list(
        archive,
        lambda cb, sk: tarfmt.scan(scanner.read, scanner.skip, archive, cb, sk, start=start),
    )
