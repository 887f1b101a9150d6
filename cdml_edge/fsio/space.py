"""What a file takes on the disk: whole blocks, not its length.

A byte bound that adds file lengths lets a store of small files take several times its bound
on the disk (a 300-byte file takes a 4 KiB block). The stores count :func:`on_disk` bytes.
"""

from __future__ import annotations

import os

DEFAULT_BLOCK = 4096  # when the file system cannot say
MAX_BLOCK = 65536  # a network file system may report its transfer size (1 MiB) as its block


def block_size(folder: str | os.PathLike[str]) -> int:
    """The allocation unit of the file system holding ``folder``, 512 B to ``MAX_BLOCK``.

    A folder not made yet is asked through its nearest existing parent (where it will be
    made); ``DEFAULT_BLOCK`` when the file system cannot say.
    """
    path = os.path.abspath(folder)
    while True:
        try:
            st = os.statvfs(path)
            break
        except FileNotFoundError:
            if os.path.dirname(path) == path:
                return DEFAULT_BLOCK
            path = os.path.dirname(path)
        except OSError:
            return DEFAULT_BLOCK
    return min(max(st.f_frsize or st.f_bsize or DEFAULT_BLOCK, 512), MAX_BLOCK)


def on_disk(nbytes: int, block: int) -> int:
    """``nbytes`` rounded up to whole blocks of ``block`` bytes (0 stays 0)."""
    return -(-nbytes // block) * block
