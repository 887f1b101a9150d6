"""Result buffers the C core fills in place (shared by the ZIP and the tar.zst faces)."""

from __future__ import annotations

from typing import Any

from cdml_edge.archive._native._reader import ffi

_from_buffer = ffi.from_buffer


def fresh_output(size: int) -> tuple[bytes | bytearray, Any]:
    """A result object of ``size`` bytes and a pointer the C core writes into.

    From 2 bytes up this is a fresh ``bytes``: not yet seen by anyone, not hashed and never
    one of CPython's cached objects, so filling it in place is safe and saves a copy of
    every member (the C core decompresses or reads straight into the returned object).
    Smaller results are a ``bytearray`` the caller turns into ``bytes``.
    """
    if size >= 2:
        out = bytes(size)
        return out, _from_buffer("uint8_t[]", out)
    arr = bytearray(max(size, 1))
    return arr, _from_buffer("uint8_t[]", arr, require_writable=True)
