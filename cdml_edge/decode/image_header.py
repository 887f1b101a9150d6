"""What an image's header claims, read without decoding: format, size, channels, sample bits.

:func:`read_header` knows every format the image decoder accepts (JPEG, PNG, BMP, WebP,
PNM, TIFF, classic and BigTIFF) whatever the member's extension; anything else is ``None``
and is not decoded. For JPEGs it also reads the components' sampling (the progressive
coefficient buffer) and counts the scans.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from cdml_edge.decode.native import helpers

PNG_SIG = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
JPEG_SOS = b"\xff\xda"
# SOF0..SOF15 carry the frame size, except DHT (C4), JPG (C8) and DAC (CC)
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RST0..RST7: a bare marker
_SEGMENT = struct.Struct(">BBH")  # 0xFF, the marker, the segment's length
_FRAME = struct.Struct(">BHHB")  # sample bits, height, width, components
_TIFF_MAGIC = {b"II*\0": "<", b"MM\0*": ">", b"II+\0": "<", b"MM\0+": ">"}


@dataclass(frozen=True)
class ImageHeader:
    """A header's claims.

    ``coefficient_bytes``: a progressive JPEG's whole-image buffer; ``buffer_bytes``: a
    TIFF's buffer of one tile or strip, which its header sizes independently of the image.
    """

    format: str
    width: int
    height: int
    channels: int = 3
    bits: int = 8
    scans: int = 1
    coefficient_bytes: int = 0
    buffer_bytes: int = 0

    @property
    def pixels(self) -> int:
        """``width x height``."""
        return self.width * self.height


_MARKER = re.compile(rb"\xff(?=[^\x00\xff])")  # an FF before a marker code
MAX_MARKERS = 4096
"""Markers walked before a JPEG's frame (or its EXIF segment) at most; past them the header
counts as unreadable. Real files hold tens; a hostile one of tiny segments is walked in
Python, about 0.15-0.26 s a megabyte, outside the decode's deadline."""


def next_marker(data: bytes, i: int) -> int:
    """Where the next JPEG marker starts at or after ``i``, as libjpeg finds it; -1 if none.

    libjpeg skips bytes that are not a marker where one is due ("extraneous bytes before
    marker", a warning: Photoshop and some cameras write them), fill bytes (``FF FF``) and
    stuffed zeros (``FF 00``); so OpenCV, Pillow and viewers show such files. One regular
    expression search, whatever the run of such bytes.
    """
    found = _MARKER.search(data, i)
    return -1 if found is None else found.start()


def find_segment(
    data: bytes, wanted: frozenset[int], start: int = 2
) -> tuple[int, int, int] | None:
    """The first segment at or after ``start`` whose marker is in ``wanted``, walked as libjpeg.

    ``(marker, offset, length)``, also for a segment too short to hold its length (the walk
    cannot go past it); ``None`` at the end of the data or after :data:`MAX_MARKERS` steps (a
    marker, or a run of bytes skipped). Markers without a length (RST0-7, TEM) are stepped
    over, bytes that are no marker skipped (:func:`next_marker`).
    """
    i, n = start, len(data)
    for _ in range(MAX_MARKERS):
        if i + 4 > n:
            return None
        ff, marker, length = _SEGMENT.unpack_from(data, i)
        if ff != 0xFF or marker == 0x00 or marker == 0xFF:  # no marker where one is due
            i = next_marker(data, i)
            if i < 0:
                return None
            continue
        if marker in _NO_LENGTH:
            i += 2
            continue
        if marker in wanted or length < 2:
            return marker, i, length
        i += 2 + length
    return None


_FRAME_OR_SCAN = _SOF_MARKERS | {0xDA}


def jpeg_header(data: bytes) -> ImageHeader | None:
    """The frame header of a JPEG (size, components, progressive), or ``None``.

    Its segments are walked as libjpeg walks them (:func:`find_segment`).
    """
    if not data.startswith(JPEG_SOI):
        return None
    found = find_segment(data, _FRAME_OR_SCAN)
    if found is None or found[0] not in _SOF_MARKERS or found[2] < 2:
        return None  # no frame header before the scan, or an unreadable one
    marker, i, length = found
    return _jpeg_frame(data[i + 4 : i + 2 + length], marker, count_scans(data))


SMALL_JPEG = 8192
"""Up to this many bytes :func:`count_scans` counts with ``bytes.count``, above in C."""


def count_scans(data: bytes) -> int:
    """Start-of-scan markers in a JPEG (``FF DA``: entropy-coded data stuffs every ``FF``).

    An upper bound (an EXIF thumbnail's scan counts too). A two-byte needle whose first byte
    is frequent costs ``bytes.count`` about 2.5 ns a byte (0.9 ms on a 350 KB photo). Above
    :data:`SMALL_JPEG` the count is therefore made by the decoders' C helper (``memchr``
    for each ``FF``: 3.6-4.2 µs for an 18-KB JPEG, call included, against 7.4 µs for
    NumPy's four operations), or by NumPy without it. Up to it ``bytes.count``: a call
    that lets go of the interpreter lock costs a thread of the agent a wait to take it
    back while others hold it. The same count every way (``FF DA`` cannot overlap itself).
    """
    if len(data) <= SMALL_JPEG:
        return data.count(b"\xff\xda")
    native = helpers()
    if native is not None:
        ffi, lib = native
        if type(data) is bytes:  # passed as it is, no wrapper
            return int(lib.cdml_count_scans(data, len(data)))
        return int(lib.cdml_count_scans(ffi.from_buffer(data), memoryview(data).nbytes))
    a = np.frombuffer(data, np.uint8)
    return int(np.count_nonzero((a[:-1] == 0xFF) & (a[1:] == 0xDA)))


def _jpeg_frame(sof: bytes, marker: int, scans: int) -> ImageHeader | None:
    if len(sof) < 6:
        return None
    bits, h, w, ncomp = _FRAME.unpack_from(sof)
    if not (w and h):
        return None
    coeff = 0
    if marker in _PROGRESSIVE_SOF:
        coeff = _coefficient_bytes(sof[7 : 6 + 3 * ncomp : 3], w, h)
    return ImageHeader("jpeg", w, h, max(ncomp, 1), max(bits, 8), scans, coeff)


def _coefficient_bytes(sampling: bytes, w: int, h: int) -> int:
    """A progressive JPEG's whole-image buffer: 64 coefficients of 2 bytes per 8x8 block.

    ``sampling``: each component's sampling factors byte (horizontal << 4 | vertical).
    """
    factors = [(b >> 4, b & 15) for b in sampling]
    if not factors:
        return 0
    hmax = max(max(s[0] for s in factors), 1)
    vmax = max(max(s[1] for s in factors), 1)
    coeff = 0
    for hs, vs in factors:
        bw = -(-w * max(hs, 1) // (hmax * 8)) + hmax
        bh = -(-h * max(vs, 1) // (vmax * 8)) + vmax
        coeff += bw * bh * 128
    return coeff


def _png_header(data: bytes) -> ImageHeader | None:
    # the signature, then the IHDR chunk: length(4) "IHDR" width(4) height(4) depth type
    if len(data) < 26 or data[12:16] != b"IHDR":
        return None
    w, h = struct.unpack(">II", data[16:24])
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(data[25], 4)
    return ImageHeader("png", w, h, channels, max(data[24], 8))


def _bmp_header(data: bytes) -> ImageHeader | None:
    if len(data) < 26:
        return None
    if int.from_bytes(data[14:18], "little") == 12:  # OS/2 BITMAPCOREHEADER
        w, h = int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little")
        return ImageHeader("bmp", w, h)
    w = int.from_bytes(data[18:22], "little", signed=True)
    h = int.from_bytes(data[22:26], "little", signed=True)
    return ImageHeader("bmp", abs(w), abs(h), 4)  # a negative height means top-down rows


def _webp_header(data: bytes) -> ImageHeader | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        w = 1 + int.from_bytes(data[24:27], "little")
        return ImageHeader("webp", w, 1 + int.from_bytes(data[27:30], "little"), 4)
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return ImageHeader("webp", 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF), 4)
    if chunk == b"VP8 " and len(data) >= 30:
        w = int.from_bytes(data[26:28], "little") & 0x3FFF
        return ImageHeader("webp", w, int.from_bytes(data[28:30], "little") & 0x3FFF, 4)
    return None


def _pnm_header(data: bytes) -> ImageHeader | None:
    # "P6 <width> <height> <maxval>" with whitespace and '#' comments between the fields;
    # P1 and P4 (bitmaps) have no maxval, a maxval over 255 means 16-bit samples
    wanted = 2 if data[1:2] in b"14" else 3
    fields: list[int] = []
    for line in data[2:256].split(b"\n"):
        for tok in line.split(b"#", 1)[0].split():
            if not tok.isdigit():
                return None
            fields.append(int(tok))
            if len(fields) == wanted:
                bits = 16 if wanted == 3 and fields[2] > 255 else 8
                return ImageHeader("pnm", fields[0], fields[1], bits=bits)
    return None


def _tiff_header(data: bytes) -> ImageHeader | None:
    """The first image (IFD) of a classic or Big TIFF; ``None`` when it cannot be read."""
    end = _TIFF_MAGIC[data[:4]]
    big = data[2:4] in (b"+\0", b"\0+")
    head, word = (end + "HHQ", 8) if big else (end + "HHI", 4)
    try:
        (ifd,) = struct.unpack_from(end + ("Q" if big else "I"), data, 8 if big else 4)
        (count,) = struct.unpack_from(end + ("Q" if big else "H"), data, ifd)
        first = ifd + (8 if big else 2)
        tags: dict[int, int] = {}
        for k in range(min(count, 4096)):
            at = first + k * (4 + 2 * word)
            tag, kind, n = struct.unpack_from(head, data, at)
            if tag in _TIFF_TAGS and kind in _TIFF_INTS:
                fmt, size = _TIFF_INTS[kind]
                where = at + 4 + word  # the value itself, or where the values are
                if n * size > word:
                    (where,) = struct.unpack_from(end + ("Q" if big else "I"), data, where)
                (tags[tag],) = struct.unpack_from(end + fmt, data, where)
    except struct.error:
        return None
    if 256 not in tags or 257 not in tags:
        return None
    w, h = tags[256], tags[257]
    bits = min(max(tags.get(258, 8), 8), 64)
    channels = max(tags.get(277, 1), 1)
    if 322 in tags or 323 in tags:  # tiled: one tile is read at a time
        area = tags.get(322, 0) * tags.get(323, 0)
    else:  # stripped: one strip of RowsPerStrip rows (at most the image) at a time
        area = w * min(tags.get(278, h), h)
    # OpenCV reads 8-bit tiles and strips as RGBA: 4 samples a pixel at least
    buffer = area * max(channels, 4) * -(-bits // 8)
    return ImageHeader("tiff", w, h, channels, bits, buffer_bytes=buffer)


_TIFF_INTS = {3: ("H", 2), 4: ("I", 4), 16: ("Q", 8)}  # SHORT, LONG, LONG8
# ImageWidth, ImageLength, BitsPerSample, SamplesPerPixel, RowsPerStrip, TileWidth, TileLength
_TIFF_TAGS = frozenset({256, 257, 258, 277, 278, 322, 323})


def read_header(data: bytes) -> ImageHeader | None:
    """The header of a JPEG, PNG, BMP, WebP, PNM or TIFF image; ``None`` for anything else."""
    if data.startswith(PNG_SIG):
        return _png_header(data)
    if data.startswith(JPEG_SOI):
        return jpeg_header(data)
    if data.startswith(b"BM"):
        return _bmp_header(data)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return _webp_header(data)
    if data[:1] == b"P" and data[1:2] in b"123456" and len(data) > 2:
        return _pnm_header(data)
    if data[:4] in _TIFF_MAGIC:
        return _tiff_header(data)
    return None
