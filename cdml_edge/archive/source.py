"""Byte sources: where archive bytes come from (a file, memory, an object store).

Every archive reader works on a :class:`ByteSource` and nothing else, so a format is
read the same way from a local file, an in-memory buffer or an ``s3://`` object.
Reads are positional (``pread``): no shared file offset, safe across threads and
after ``fork``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]
from typing import Protocol, runtime_checkable

from cdml_edge.archive.errors import ArchiveChangedError, UnsupportedArchiveError


@runtime_checkable
class ByteSource(Protocol):
    """Random-access, read-only bytes with a known size."""

    @property
    def name(self) -> str:
        """Human-readable name used in error messages (path, ``<memory>``, ``s3://b/k``)."""
        ...

    def size(self) -> int:
        """Total size in bytes."""
        ...

    def pread(self, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset`` (short only at end of data)."""
        ...

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read several ``(offset, length)`` ranges; sources may coalesce requests."""
        ...

    def fileno(self) -> int | None:
        """An OS file descriptor usable with ``pread(2)`` by native code, or ``None``."""
        ...

    def close(self) -> None:
        """Release handles; the source may be reopened lazily afterwards."""
        ...


class MemorySource:
    """An archive held in memory (``bytes``, ``bytearray`` or ``memoryview``)."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<memory>") -> None:
        self._data = bytes(data) if not isinstance(data, bytes) else data
        self._name = name

    @property
    def name(self) -> str:
        """The name given at construction (``<memory>`` by default)."""
        return self._name

    @property
    def data(self) -> bytes:
        """The bytes held."""
        return self._data

    def size(self) -> int:
        """Length of the data in bytes."""
        return len(self._data)

    def pread(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of the data (short at the end)."""
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        return self._data[offset : offset + length]

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """One :meth:`pread` per ``(offset, length)`` range."""
        return [self.pread(o, n) for o, n in ranges]

    def fileno(self) -> int | None:
        """Always ``None``: memory has no descriptor."""
        return None

    def close(self) -> None:
        """Nothing to release."""


class FileSource:
    """A local file read with ``os.pread``; the descriptor is reopened after ``fork``.

    The file is the one stat'ed at construction: its identity (device, inode, size and,
    unless ``watch_mtime=False``, ``mtime``) is kept, and every descriptor opened later (a
    forked child's, a spawned worker's after unpickling, one after :meth:`close`) must be
    that file, else :class:`~cdml_edge.archive.errors.ArchiveChangedError`: an archive
    replaced at its path (``os.replace``, as ``tar`` and :func:`write_archive` write) is
    never read with the member index of the old one. A forked child opens its own
    descriptor on the parent's open file (``/proc/self/fd``) where it can, so it keeps
    reading the file the index was built from. ``name`` is what messages call the file
    (default: the path).

    ``keyed=True``: the path names its content (a seekable copy, whose file name is the key
    of its source's version): a file put in place there by another process with the same
    size is the same bytes, so only the size is checked; each descriptor holds a shared
    ``flock`` (the cache deletes no other version's copy while one is held), and a
    copy found gone is an :class:`~cdml_edge.archive.errors.ArchiveChangedError` naming
    ``name``, not a bare :class:`FileNotFoundError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        watch_mtime: bool = True,
        keyed: bool = False,
    ) -> None:
        self._path = os.fspath(path)
        self._name = name
        self._watch_mtime = watch_mtime
        self._keyed = keyed
        self._fd: int | None = None
        self._pid = -1
        self._lock = threading.Lock()
        st = os.stat(self._path)
        if stat.S_ISDIR(st.st_mode):  # named, not a bare EISDIR from the first pread
            raise IsADirectoryError(errno.EISDIR, "a folder, not an archive", self._path)
        if stat.S_ISFIFO(st.st_mode):  # opening one for reading waits for a writer
            raise UnsupportedArchiveError(
                "a FIFO (named pipe), not an archive file: it cannot be read at random",
                archive=self._name or self._path,
            )
        self._size = st.st_size
        self._identity = self._identity_of(st)

    @property
    def name(self) -> str:
        """What messages call the file: its path unless a name was given."""
        return self._name or self._path

    @property
    def path(self) -> str:
        """The file's path."""
        return self._path

    def _identity_of(self, st: os.stat_result) -> tuple[int, ...]:
        if self._keyed:
            return (st.st_size,)
        ident = (st.st_dev, st.st_ino, st.st_size)
        return (*ident, st.st_mtime_ns) if self._watch_mtime else ident

    def _descriptor(self) -> int:
        pid = os.getpid()
        fd = self._fd
        if fd is not None and self._pid == pid:
            return fd
        with self._lock:
            if self._fd is None or self._pid != pid:
                self._fd = self._reopen(self._fd if self._pid != pid else None)
                self._pid = pid
            return self._fd

    def _reopen(self, inherited: int | None) -> int:
        """A descriptor of this process on the file the identity names, checked.

        ``inherited``: the parent's descriptor (a forked child), opened anew through
        ``/proc/self/fd`` (the parent's file even if its path was replaced), else the path.
        """
        # O_NONBLOCK: a FIFO put at the path since (refused by identity) is not waited on
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        if inherited is not None:
            with contextlib.suppress(OSError):
                fd = os.open(f"/proc/self/fd/{inherited}", flags)
                if self._same(fd):
                    return self._held(fd)
                os.close(fd)  # that number names another file now: the path, checked
        try:
            fd = os.open(self._path, flags)
        except FileNotFoundError:
            if not self._keyed:
                raise
            raise ArchiveChangedError(
                "the seekable copy was deleted after the archive was opened (evicted from "
                "the cache): open the archive again (rebuild the dataset)",
                archive=self.name,
            ) from None
        if self._same(fd):
            return self._held(fd)
        os.close(fd)
        raise ArchiveChangedError(
            "the file was replaced or changed after the archive was opened (its member "
            "index is the old file's): open it again (rebuild the dataset)",
            archive=self.name,
        )

    def _held(self, fd: int) -> int:
        """``fd``, with a shared lock on it for a keyed file (a copy in use)."""
        if self._keyed and fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return fd

    def _same(self, fd: int) -> bool:
        """Whether ``fd`` is the file this source was opened on (unchanged)."""
        try:
            return self._identity_of(os.fstat(fd)) == self._identity
        except OSError:
            return False

    def size(self) -> int:
        """File size in bytes, taken at construction."""
        return self._size

    def pread(self, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset`` with ``os.pread`` (short only at the end)."""
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        fd = self._descriptor()
        out = os.pread(fd, length, offset)
        if len(out) == length or len(out) == 0:
            return out
        parts = [out]
        got = len(out)
        while got < length:
            chunk = os.pread(fd, length - got, offset + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """One :meth:`pread` per ``(offset, length)`` range."""
        return [self.pread(o, n) for o, n in ranges]

    def fileno(self) -> int | None:
        """The descriptor, opened on first use and again in a forked child."""
        return self._descriptor()

    def close(self) -> None:
        """Close this process's descriptor; the next read reopens it (checked)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, object]:
        return {
            "path": self._path,
            "name": self._name,
            "watch_mtime": self._watch_mtime,
            "keyed": self._keyed,
            "size": self._size,
            "identity": self._identity,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        if "identity" not in state:  # pickled before identities were kept
            self.__init__(str(state["path"]))  # type: ignore[misc]
            return
        # no stat here: the receiving process checks the file when it first opens it
        self._path = str(state["path"])
        name = state.get("name")
        self._name = name if isinstance(name, str) else None
        self._watch_mtime = bool(state["watch_mtime"])
        self._keyed = bool(state.get("keyed", False))
        self._size = int(state["size"])  # type: ignore[call-overload]
        self._identity = tuple(state["identity"])  # type: ignore[arg-type]
        self._fd = None
        self._pid = -1
        self._lock = threading.Lock()


class FileObjectSource:
    """A binary file object opened by the caller (positional reads; its offset is kept).

    Reads use ``os.pread`` on its descriptor when it has one, else seek+read under a lock.
    It pickles as a :class:`FileSource` on the same path when the object names a file, one
    that refuses another file found there (:class:`FileSource`).
    """

    def __init__(self, fileobj: object) -> None:
        self._f = fileobj
        self._lock = threading.Lock()
        raw_name = getattr(fileobj, "name", None)
        self._path = raw_name if isinstance(raw_name, str) and os.path.isfile(raw_name) else None
        self._fd: int | None
        try:
            self._fd = int(fileobj.fileno())  # type: ignore[attr-defined]
            os.pread(self._fd, 0, 0)
        except (AttributeError, OSError, ValueError):
            self._fd = None
        with self._lock:
            pos = fileobj.tell()  # type: ignore[attr-defined]
            fileobj.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
            self._size = int(fileobj.tell())  # type: ignore[attr-defined]
            fileobj.seek(pos)  # type: ignore[attr-defined]
        # the identity of the file opened, taken now (a file put at the path before the
        # archive is pickled is refused where it is unpickled); the object's own size,
        # so a path that names another file already (no descriptor to stat) is refused too
        self._identity: tuple[int, ...] | None = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                st = os.fstat(self._fd) if self._fd is not None else os.stat(self._path)
                self._identity = (st.st_dev, st.st_ino, self._size, st.st_mtime_ns)

    @property
    def name(self) -> str:
        """The file's path, or ``<file NAME>`` when the object names no file."""
        return self._path or f"<file {getattr(self._f, 'name', '?')}>"

    def size(self) -> int:
        """Size in bytes, taken at construction."""
        return self._size

    def pread(self, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset``; the object's own offset is kept."""
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        if self._fd is not None:
            parts = []
            while length > 0:
                chunk = os.pread(self._fd, length, offset)
                if not chunk:
                    break
                parts.append(chunk)
                offset += len(chunk)
                length -= len(chunk)
            return b"".join(parts)
        f = self._f
        with self._lock:
            pos = f.tell()  # type: ignore[attr-defined]
            try:
                f.seek(offset)  # type: ignore[attr-defined]
                return bytes(f.read(length))  # type: ignore[attr-defined]
            finally:
                f.seek(pos)  # type: ignore[attr-defined]

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """One :meth:`pread` per ``(offset, length)`` range."""
        return [self.pread(o, n) for o, n in ranges]

    def fileno(self) -> int | None:
        """The object's descriptor, or ``None`` when it has none usable with ``os.pread``."""
        return self._fd

    def close(self) -> None:
        """Nothing to release: the caller owns the file object."""

    def __reduce__(self) -> tuple[object, ...]:
        if self._path is None or self._identity is None:
            raise TypeError(f"{self.name}: an archive on an unnamed file object cannot be pickled")
        # a FileSource that must find this very file at the path (checked when it opens it):
        # the file as it was when the archive was opened
        ident = self._identity
        state = {"path": self._path, "watch_mtime": True, "size": self._size, "identity": ident}
        return (_file_source, (state,))


def _file_source(state: dict[str, object]) -> FileSource:
    """A :class:`FileSource` from its pickled state (the file is checked when first opened)."""
    source = FileSource.__new__(FileSource)
    source.__setstate__(state)
    return source
