"""What every source shares: the sinks it feeds, its counters and its typed errors.

Each typed error names the file (as :func:`~cdml_edge.fsio.display_name` shows it: valid
UTF-8 whatever bytes the name holds), says which ``errors`` counter stage it counts under
(``stage``) and whether the file goes to quarantine (``quarantine``) or is left where it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import display_name
from cdml_edge.window.items import Item

ItemSink = Callable[[Item], None]
ErrorSink = Callable[[str, str | None, Exception, Path | None], None]
"""``(source, item name, error, path)`` — called for an item that could not be taken; with a
``path`` the caller quarantines the file, without one the file is left alone."""


KEPT_IN_PLACE = "; left in place (on_done: keep)"
"""How the message of an error ends when its file, of an ``on_done: keep`` folder, is left."""


class SourceError(CdmlError):
    """An input that cannot be taken (vanished, unreadable); names the file.

    ``left_in_place``: a file the error would have quarantined, left where it is because it
    belongs to an ``on_done: keep`` folder (counted in ``FileLifecycle.left_in_place``).
    ``failure``: False for the end of a state (:class:`FolderReadable`), reported on the
    same channel but not counted as an error.
    """

    stage = "read"
    quarantine = False
    left_in_place = False
    failure = True

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{display_name(str(path))}: {message}")
        self.path = str(path)


class FileTooLarge(SourceError):
    """A file bigger than one window or the in-flight budget may hold; never read.

    Quarantined, but a keep folder's file (``kept``): that is left where it is, said so.
    """

    quarantine = True

    def __init__(self, path: Path | str, size: int, limit: int, *, kept: bool = False) -> None:
        left = KEPT_IN_PLACE if kept else ""
        super().__init__(path, f"too large: {size} bytes, limit {limit}{left}")
        self.size = size
        self.limit = limit
        self.quarantine = not kept
        self.left_in_place = kept


class FileUnreadable(SourceError):
    """A file the agent may not open (its permissions): left, reported once until it changes.

    Its content or its mode (a ``chmod`` that lets the agent read it) changing is a change:
    it is then taken.
    """

    stage = "unreadable"

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(path, f"unreadable: {why}; left until it changes")


class FolderUnreadable(SourceError):
    """The watched folder cannot be listed or its entries looked up (its permissions).

    A state of the source: reported when it begins, its files taken (a rescan) once it ends.
    """

    stage = "folder_unreadable"

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(path, f"the folder cannot be read ({why}): its files wait until it can")


class SubfolderUnreadable(FolderUnreadable):
    """A subfolder of a ``recursive`` source cannot be listed, searched or watched.

    A state of that subfolder: reported when it begins (the event's item names it), checked
    again every second, its files taken (the tree watched again and rescanned) once it ends.
    """

    stage = "subfolder_unreadable"

    def __init__(self, path: Path | str, why: str) -> None:
        SourceError.__init__(
            self, path, f"the subfolder cannot be read ({why}): its files wait until it can"
        )


class FolderReadable(SourceError):
    """The end of a :class:`FolderUnreadable` (or :class:`SubfolderUnreadable`) state.

    Not a failure: the folder can be read again (and is rescanned), or a subfolder is gone.
    """

    stage = "folder_readable"
    failure = False

    def __init__(self, path: Path | str, *, gone: bool = False) -> None:
        said = "is gone: no longer waited for" if gone else "can be read again: rescanned"
        super().__init__(path, said)


class NotRegularFile(SourceError):
    """A FIFO, socket, device or folder where a file was expected: never opened, left."""

    stage = "not_regular"

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(path, f"not a regular file ({kind}): left alone, never opened")
        self.kind = kind


class LinkRefused(SourceError):
    """A symbolic link not followed: links are off, or it leads outside the allowed roots."""

    stage = "symlink"

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(path, f"symbolic link not followed: {why}")


class IntakeFault(SourceError):
    """An unexpected error while taking one file; the file is quarantined, the source goes on.

    A keep folder's file (``kept``) is left where it is instead, and the message says so.
    """

    stage = "intake"
    quarantine = True

    def __init__(self, path: Path | str, exc: BaseException, *, kept: bool = False) -> None:
        left = KEPT_IN_PLACE if kept else ""
        super().__init__(path, f"could not be taken: {type(exc).__name__}: {exc}{left}")
        self.quarantine = not kept
        self.left_in_place = kept


class WatchLost(SourceError):
    """The watch of a folder stopped (the folder was deleted, moved or unmounted)."""

    stage = "watch"


@dataclass
class SourceStats:
    """A source's counters since it started (read by the metrics)."""

    taken: int = 0
    taken_bytes: int = 0
    skipped: int = 0  # camera frames refused by the budget
    paused: int = 0  # scans that left a complete file on disk because the budget was full
    errors: int = 0
    refused: int = 0  # special files and links left alone (each reported once)
    future_mtime: int = 0  # files with an mtime ahead of the clock: ts is when they were seen
    renamed: int = 0  # files taken (or kept) seen again under a new name: not taken again
