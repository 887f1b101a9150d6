"""Pixel bombs are refused from the image header, before decoding."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zlib

import cv2
import numpy as np
import pytest

from cdml_edge.decode import DecodeError, decode, decode_image, image_size


def png_bomb(width: int, height: int) -> bytes:
    """A real, valid all-black 8-bit grey PNG, compressed row by row (never held whole)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body).to_bytes(4, "big")
        return len(body).to_bytes(4, "big") + kind + body + crc

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    comp = zlib.compressobj(9)
    row = bytes(1 + width)  # filter byte 0, then the grey samples
    idat = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def encoded(ext: str, w: int, h: int) -> bytes:
    img = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(ext, img)
    assert ok
    return buf.tobytes()


def test_png_bomb_refused_from_header_without_allocating() -> None:
    bomb = png_bomb(8000, 8000)
    assert len(bomb) < 200_000 and image_size(bomb) == (8000, 8000)
    with pytest.raises(DecodeError) as err:
        decode_image(bomb, member="cam/bomb.png")
    assert err.value.member == "cam/bomb.png" and "64000000 pixels" in str(err.value)
    # in a fresh process, the refused decode must not raise the peak RSS by the 192 MB
    # that decoding would take (the limit itself is high enough that it is never reached)
    code = textwrap.dedent(
        """
        import resource, sys
        from cdml_edge.decode import DecodeError, decode_image
        bomb = sys.stdin.buffer.read()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            decode_image(bomb, member="bomb.png")
        except DecodeError:
            pass
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=bomb, capture_output=True, check=True, timeout=120
    )
    grown_kib = int(out.stdout)
    assert grown_kib < 50 * 1024, f"peak RSS grew {grown_kib} KiB"


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp", ".webp", ".ppm", ".tiff"])
def test_max_pixels_limit_per_format(ext: str) -> None:
    data = encoded(ext, 300, 200)
    if ext != ".tiff":  # TIFF has no cheap header size; it is checked after decoding
        assert image_size(data) == (300, 200)
    assert decode_image(data, max_pixels=60_000).shape == (200, 300, 3)
    with pytest.raises(DecodeError, match="300x200 = 60000 pixels, over the limit of 59999"):
        decode_image(data, member=f"x{ext}", max_pixels=59_999)
    assert decode(data, f"x{ext}", max_pixels=None).shape == (200, 300, 3)
    with pytest.raises(DecodeError) as err:
        decode(data, f"cam/x{ext}", max_pixels=1000)
    assert err.value.member == f"cam/x{ext}"


def test_jpeg_limit_applies_before_reduced_decoding() -> None:
    data = encoded(".jpg", 800, 600)
    with pytest.raises(DecodeError, match="480000 pixels"):
        decode_image(data, target_size=50, max_pixels=100_000)
