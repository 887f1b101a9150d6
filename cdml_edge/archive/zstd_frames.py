"""zstd frames the reader does not decode, told apart from corrupt ones.

A frame that needs a larger window than the decoder allows (``zstd --long=30``: a 1 GiB
window; the zstandard package and libzstd allow 128 MiB by default) or that was made with a
dictionary is valid zstd this reader does not support: :class:`UnsupportedArchiveError`
says which and why. Every other decoding failure is :class:`CorruptArchiveError`.
"""

from __future__ import annotations

import zstandard

from cdml_edge.archive.errors import ArchiveError, CorruptArchiveError, UnsupportedArchiveError

#: the largest window the decoders allow (libzstd's ZSTD_WINDOWLOG_LIMIT_DEFAULT, 2**27)
MAX_WINDOW = 1 << 27
#: the longest zstd frame header (magic, descriptor, window, dictionary id, content size)
HEADER_BYTES = 18


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _window(needed: int | None) -> str:
    what = f"a window of {_size(needed)}" if needed else "a larger window"
    return (
        f"zstd frame needs {what}; the reader allows at most {_size(MAX_WINDOW)} "
        "(written with zstd --long?): not supported"
    )


def _dictionary(dict_id: int | None) -> str:
    which = f" (id {dict_id})" if dict_id else ""
    return f"zstd frame made with a dictionary{which}: not supported"


def unsupported_reason(header: bytes | memoryview | None) -> str | None:
    """Why a frame starting with ``header`` cannot be decoded here; ``None``: it can."""
    if not header:
        return None
    try:
        params = zstandard.get_frame_parameters(bytes(header[:HEADER_BYTES]))
    except (zstandard.ZstdError, ValueError):
        return None  # not a zstd frame header (cut short, skippable or corrupt)
    if params.dict_id:
        return _dictionary(params.dict_id)
    if params.window_size > MAX_WINDOW:
        return _window(params.window_size)
    return None


def zstd_error(
    exc: Exception,
    *,
    archive: str | None,
    member: str | None = None,
    header: bytes | memoryview | None = None,
    what: str = "zstd data",
) -> ArchiveError:
    """The error to raise for ``exc``, a zstd decoding failure of the frame at ``header``.

    Unsupported when the frame's header (or, without it, the decoder's message) says it
    needs too large a window or a dictionary; else corrupt (``what: exc``).
    """
    why = unsupported_reason(header)
    if why is None:
        text = str(exc)
        if "too much memory" in text or "indowLog" in text:
            why = _window(None)
        elif "Dictionary mismatch" in text or "dictionary_wrong" in text:
            why = _dictionary(None)
    if why is not None:
        return UnsupportedArchiveError(why, archive=archive, member=member)
    return CorruptArchiveError(f"{what}: {exc}", archive=archive, member=member)
