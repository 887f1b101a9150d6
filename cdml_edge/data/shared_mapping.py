"""A shared mapping of a descriptor that keeps no descriptor open, unmapped when unused.

Python's ``mmap.mmap`` keeps a duplicate of the descriptor it maps until it is closed
(``trackfd`` came in Python 3.13), and a forked child inherits that descriptor, and with it
the memory behind it, even where the mapping itself is not passed on (``MADV_DONTFORK``).
This maps with ``mmap(2)`` itself: the caller closes its descriptor at once, and the
mapping goes when the last NumPy array over it is freed.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import weakref

_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's ``mmap``, ``munmap`` and ``madvise`` (loaded on first use: POSIX only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


Mapping = ctypes.Array  # of c_uint8: NumPy reads it as a buffer and keeps it alive


def map_shared(fd: int, size: int) -> Mapping:
    """``size`` bytes of ``fd`` mapped shared, read and write; the descriptor is not kept."""
    libc = _libc()
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes: {os.strerror(err)}")
    mapping = (ctypes.c_uint8 * size).from_address(address)
    weakref.finalize(mapping, libc.munmap, address, size).atexit = False
    return mapping


def pass_to_children(mapping: Mapping, passed: bool) -> None:
    """Whether a forked child gets this mapping (``MADV_DOFORK`` / ``MADV_DONTFORK``)."""
    advice = getattr(mmap, "MADV_DOFORK" if passed else "MADV_DONTFORK", None)
    if advice is not None:
        _libc().madvise(ctypes.addressof(mapping), len(mapping), advice)
