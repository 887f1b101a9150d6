"""ZIP compression methods: member decompression with bounded output (the Python path)."""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import zlib

import zstandard

from cdml_edge.archive.errors import (
    CorruptArchiveError,
    TruncatedArchiveError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.zstd_frames import zstd_error

STORED, DEFLATE, BZIP2, LZMA, ZSTD = 0, 8, 12, 14, 93
METHOD_NAMES = {STORED: "stored", DEFLATE: "deflate", BZIP2: "bzip2", LZMA: "lzma", ZSTD: "zstd"}


def method_name(method: int) -> str:
    """The name of a ZIP compression method (``method-N`` for unknown ones)."""
    return METHOD_NAMES.get(method, f"method-{method}")


#: methods other tools write that this reader does not decode (APPNOTE 4.4.5)
UNSUPPORTED_NAMES = {
    6: "Implode",
    9: "Deflate64",
    10: "PKWARE DCL Implode",
    18: "IBM TERSE",
    19: "IBM LZ77",
    95: "xz",
    96: "JPEG",
    97: "WavPack",
    98: "PPMd",
    99: "AES",
}


def unsupported_method(method: int) -> str:
    """Why a ``method`` member is refused: ``compression method 9 (Deflate64) is not ...``."""
    known = METHOD_NAMES.get(method) or UNSUPPORTED_NAMES.get(method)
    named = f"method {method} ({known})" if known else f"method {method}"
    return f"compression {named} is not supported"


def zstd_decompress(data: bytes | memoryview, size: int, *, archive: str, member: str) -> bytes:
    """Decompress zstd frames to at most ``size + 1`` bytes (declared sizes are not trusted)."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        )
        out = reader.read(size + 1) if size >= 0 else reader.read()
    except zstandard.ZstdError as exc:
        raise zstd_error(exc, archive=archive, member=member, header=data) from exc
    return out


def lzma_decompress(data: bytes | memoryview, size: int, *, archive: str, member: str) -> bytes:
    """A ZIP LZMA member (method 14): version, properties, raw LZMA1, read as zipfile does."""
    raw = bytes(data)
    if len(raw) < 4 or len(raw) < 4 + struct.unpack_from("<H", raw, 2)[0]:
        raise TruncatedArchiveError("LZMA header cut short", archive=archive, member=member)
    end = 4 + struct.unpack_from("<H", raw, 2)[0]
    try:
        # the standard library's own decoder of the properties (what zipfile calls)
        props = lzma._decode_filter_properties(lzma.FILTER_LZMA1, raw[4:end])  # type: ignore[attr-defined]
        dec = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[props])
        return dec.decompress(raw[end:], size + 1)
    except (lzma.LZMAError, ValueError) as exc:
        raise CorruptArchiveError(f"lzma data: {exc}", archive=archive, member=member) from exc


def decompress(
    method: int, data: bytes | memoryview, size: int, *, archive: str, member: str
) -> bytes:
    """Decode one member's data to exactly ``size`` bytes, or raise a typed error."""
    if method == STORED:
        out = bytes(data)
    elif method == DEFLATE:
        d = zlib.decompressobj(-15)
        try:
            out = d.decompress(data, size + 1)
        except zlib.error as exc:
            raise CorruptArchiveError(
                f"deflate data: {exc}", archive=archive, member=member
            ) from exc
        if len(out) <= size and not d.eof:
            raise TruncatedArchiveError("deflate stream ends early", archive=archive, member=member)
    elif method == ZSTD:
        out = zstd_decompress(data, size, archive=archive, member=member)
    elif method == LZMA:
        out = lzma_decompress(data, size, archive=archive, member=member)
    elif method == BZIP2:
        try:
            out = bz2.BZ2Decompressor().decompress(bytes(data), size + 1)
        except (OSError, ValueError) as exc:
            raise CorruptArchiveError(f"bzip2 data: {exc}", archive=archive, member=member) from exc
    else:
        raise UnsupportedArchiveError(unsupported_method(method), archive=archive, member=member)
    if len(out) != size:
        raise CorruptArchiveError(
            f"size mismatch: declared {size} bytes, data holds "
            f"{'more' if len(out) > size else len(out)}",
            archive=archive,
            member=member,
        )
    return out


def check_crc(data: bytes, crc: int, *, archive: str, member: str) -> None:
    """Raise :class:`CorruptArchiveError` when ``data``'s CRC-32 is not ``crc``."""
    got = zlib.crc32(data)
    if got != crc:
        raise CorruptArchiveError(
            f"CRC-32 mismatch: stored {crc:08x}, data {got:08x}", archive=archive, member=member
        )
