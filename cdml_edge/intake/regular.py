"""Reading only regular files inside the watched folder.

:func:`admit` judges a folder entry from its ``lstat``: a FIFO, socket, device (or a link
to one) is :class:`~.base.NotRegularFile`; a symbolic link is
:class:`~.base.LinkRefused` unless the :class:`LinkPolicy` follows links, and then only to
a target inside the folder or one of its ``link_roots`` (after resolving every link and
``..``). :func:`read_regular` opens with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO swapped in at
the last moment neither blocks nor is read) and checks with ``fstat`` that what it opened
is a regular file. What was read through a followed link has a :class:`LinkedIdentity`
(:func:`link_at`, :func:`identity_read`): the target's identity and the link's own (its
inode and what it says), so that ``on_done`` acts on that link only while it still leads to
that version (:mod:`~.finishing`).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.fsio import display_name
from cdml_edge.intake.base import FileUnreadable, LinkRefused, NotRegularFile, SourceError
from cdml_edge.window.items import FileIdentity

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def kind_of(mode: int) -> str:
    """What a file mode is, in words."""
    for test, kind in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return kind
    return "regular file" if stat.S_ISREG(mode) else "unknown file type"


@dataclass(frozen=True)
class LinkPolicy:
    """Whether links are followed, and into which folders (real paths, links resolved)."""

    follow: bool = False
    roots: tuple[str, ...] = ()

    @classmethod
    def of(cls, follow: bool, folder: Path, roots: tuple[Path, ...] = ()) -> LinkPolicy:
        """The policy of a source: with ``follow``, links may lead into ``folder`` or ``roots``."""
        if not follow:
            return cls()
        return cls(True, tuple(os.path.realpath(r) for r in (folder, *roots)))

    def target(self, path: str) -> str:
        """The real file a link at ``path`` leads to; :class:`LinkRefused` when not allowed."""
        if not self.follow:
            raise LinkRefused(path, "links are not followed (follow_symlinks is off)")
        real = os.path.realpath(path)
        if not any(os.path.commonpath([real, root]) == root for root in self.roots):
            raise LinkRefused(
                path, f"its target {display_name(real)} is outside the folder and link_roots"
            )
        return real


@dataclass(frozen=True)
class LinkedIdentity(FileIdentity):
    """What was read through a followed link: its target, and the link itself.

    The fields of :class:`FileIdentity` are the target's; ``link_dev``, ``link_ino`` and
    ``link_to`` the link's own (its ``lstat`` and its text as ``readlink`` gives it).
    Never equal to a plain :class:`FileIdentity`: compare :attr:`target` for the file read.
    """

    link_dev: int = 0
    link_ino: int = 0
    link_to: str = ""

    @property
    def target(self) -> FileIdentity:
        """The identity of the file read (the link's target)."""
        return FileIdentity(
            self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns, self.settled
        )

    def is_link(self, lst: os.stat_result, text: str) -> bool:
        """Whether ``lst`` (an ``lstat``) and ``text`` (its ``readlink``) are this link."""
        return stat.S_ISLNK(lst.st_mode) and (lst.st_dev, lst.st_ino, text) == (
            self.link_dev,
            self.link_ino,
            self.link_to,
        )


def target_of(ident: FileIdentity) -> FileIdentity:
    """The identity of the file read: the target of a followed link, else ``ident`` itself."""
    return ident.target if isinstance(ident, LinkedIdentity) else ident


def admit(path: str, lst: os.stat_result, links: LinkPolicy) -> tuple[str, os.stat_result]:
    """What to open for the entry ``path`` (with ``lst``, its ``lstat``) and that file's stat.

    Raises :class:`NotRegularFile` or :class:`LinkRefused` for an entry never to open, and
    ``OSError`` when a followed link's target is gone.
    """
    if stat.S_ISLNK(lst.st_mode):
        real = links.target(path)
        st = os.lstat(real)  # every link on the way is resolved: this is the file itself
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, f"a link to a {kind_of(st.st_mode)}")
        return real, st
    if not stat.S_ISREG(lst.st_mode):
        raise NotRegularFile(path, kind_of(lst.st_mode))
    return path, lst


def link_at(path: str) -> tuple[os.stat_result, str] | None:
    """The ``lstat`` and text (``readlink``) of the link at ``path``; ``None`` if not a link."""
    try:
        lst = os.lstat(path)
        return (lst, os.readlink(path)) if stat.S_ISLNK(lst.st_mode) else None
    except OSError:  # gone, or no longer a link: read_regular says what it is
        return None


def identity_read(
    st: os.stat_result, seen_ns: int, link: tuple[os.stat_result, str] | None
) -> FileIdentity:
    """The identity of a file read with ``st`` (its ``fstat``), through ``link`` if given.

    ``seen_ns``: ``time.time_ns()`` taken before the read (:meth:`FileIdentity.read_at`);
    ``link``: what :func:`link_at` gave before the read. A link swapped meanwhile is never
    finished: it is not the link recorded, or does not lead to the file read.
    """
    ident = FileIdentity.read_at(st, seen_ns)
    if link is None:
        return ident
    lst, text = link
    return LinkedIdentity(
        ident.dev,
        ident.ino,
        ident.size,
        ident.mtime_ns,
        ident.ctime_ns,
        ident.settled,
        lst.st_dev,
        lst.st_ino,
        text,
    )


def read_regular(path: str, at_most: int, links: LinkPolicy) -> tuple[bytes, os.stat_result]:
    """Read at most ``at_most`` bytes of the regular file at ``path``, with their ``fstat``.

    ``at_most`` is the expected size + 1, so growth shows.
    """
    try:
        target, _ = admit(path, os.lstat(path), links)
        fd = os.open(target, _OPEN_FLAGS)
    except FileNotFoundError as exc:
        raise SourceError(path, "vanished before it could be read") from exc
    except PermissionError as exc:  # its mode (or its folder's): another owner, chmod 000
        raise FileUnreadable(path, exc.strerror or str(exc)) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since it was judged
            raise LinkRefused(path, "it became a link") from exc
        raise SourceError(path, f"unreadable: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind_of(st.st_mode))
        return _read_fd(fd, at_most, st.st_size), st
    except OSError as exc:
        raise SourceError(path, f"unreadable: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _read_fd(fd: int, at_most: int, size: int) -> bytes:
    """Up to ``at_most`` bytes of the open regular file ``fd`` of ``size`` bytes (its fstat).

    Plain ``read`` calls: one when it returns the whole file, more only after a short read
    (a file system that returns less) or while the file grows. A buffered file object would
    add an ``fstat``, an ``ioctl`` and an ``lseek``, and a last ``read`` to see the end.
    """
    data = os.read(fd, at_most)
    if len(data) >= min(at_most, size) or not data:
        return data
    parts = [data]
    got = len(data)
    while got < at_most and (chunk := os.read(fd, at_most - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
