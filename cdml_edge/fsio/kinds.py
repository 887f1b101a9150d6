"""What a file is, in words, for messages that refuse anything but a regular file."""

from __future__ import annotations

import stat


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, e.g. ``a character device``, ``a folder``."""
    for test, kind in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "an unknown file type"
