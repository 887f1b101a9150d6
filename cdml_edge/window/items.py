"""The units a window is made of: :class:`Item` (a file or a frame) and :class:`Window`.

Sources produce items, the agent's windowers group them into windows, and
:func:`~cdml_edge.window.pack.pack_window` turns a closed window into an archive. An item
from a file remembers the :class:`FileIdentity` of what was read, so that what happens to
the file afterwards (``on_done``) acts only on that version.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdml_edge.fsio import display_name

CTIME_SETTLE_NS = 50_000_000
"""How long before a read a file's last change must lie for its change time to vouch for
it afterwards: far more than the kernel's timestamp tick (1-10 ms), so any later change
gets a later change time."""

CTIME_COARSE_NS = 10_000_000
"""A change time that is a whole multiple of this (10 ms) comes from a file system whose
timestamps tick that coarsely or more (exFAT, FAT, whole seconds): it never vouches, as a
rewrite within the same tick would keep it."""


@dataclass(frozen=True)
class FileIdentity:
    """Which version of a file was read: device, inode, size and mtime (ns).

    ``ctime_ns`` and ``settled`` are no part of the identity (equality and hash ignore
    them): an identity taken by :meth:`read_at` is ``settled`` when the file's last change
    (``st_ctime``, of a file system with fine timestamps: see :data:`CTIME_COARSE_NS`) lies
    at least :data:`CTIME_SETTLE_NS` before the read. Every later write, truncate, ``utime``
    or ``chmod`` then moves the change time on, and nothing but the kernel sets it, so an
    unchanged ``ctime_ns`` vouches that the content is what was read.
    """

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int = field(default=0, compare=False)
    settled: bool = field(default=False, compare=False)

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity of the file ``st`` was taken from."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def read_at(cls, st: os.stat_result, seen_ns: int) -> FileIdentity:
        """The identity of a file read with ``st`` (its ``fstat``).

        ``seen_ns``: ``time.time_ns()`` taken before the read.
        """
        ctime = st.st_ctime_ns
        settled = ctime % CTIME_COARSE_NS != 0 and 0 < ctime <= seen_ns - CTIME_SETTLE_NS
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, settled)


@dataclass
class Item:
    """One unit of input: a file from a folder or a frame from a camera.

    ``name`` is valid UTF-8 (what payloads, the manifest and member names carry: raw bytes
    that are not UTF-8 shown as ``%XX``, also in a name given with ``os.fsdecode``'s lone
    surrogates); ``path`` is the file as it is on disk.
    """

    source: str
    name: str
    modality: str
    ts: float  # unix seconds: file mtime (close time) or capture time
    data: bytes
    item_id: str
    path: Path | None = None  # the source file, ``None`` for camera frames
    size: int = 0
    mtime_ns: int = 0
    charge: int = 0  # bytes of the budget this item holds (0: just its data)
    identity: FileIdentity | None = None  # the version of ``path`` that was read

    def __post_init__(self) -> None:
        if not self.name.isascii():  # a caller's own name with a byte that is not UTF-8
            self.name = display_name(self.name)

    @property
    def nbytes(self) -> int:
        """Length of the item's data in bytes."""
        return len(self.data)

    @property
    def held(self) -> int:
        """Budget bytes to release when the item's window is done."""
        return self.charge or len(self.data)


@dataclass
class Window:
    """The items of one source that are packed, scored and emitted together."""

    window_id: str
    source: str
    opened_ts: float
    items: list[Item] = field(default_factory=list)
    closed_ts: float = 0.0
    nbytes: int = 0
    charged: int = 0  # budget bytes its items hold (released when the window is done)
    reason: str = ""  # "seconds" | "max_items" | "max_bytes" | "stop"

    def take_charge(self) -> int:
        """The budget bytes to release for this window, once: later calls give 0."""
        charged, self.charged = self.charged, 0
        return charged


_counter = itertools.count(1)


def new_window_id(source: str, opened_ts: float) -> str:
    """Unique, sortable window id: ``{source}-{utc stamp}-{pid}-{n}``."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(opened_ts))
    ms = int((opened_ts % 1) * 1000)
    return f"{source}-{stamp}.{ms:03d}Z-{os.getpid()}-{next(_counter)}"
