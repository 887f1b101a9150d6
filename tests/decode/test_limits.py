"""Hostile inputs: pixel bombs are refused from the header; every bad input is DecodeError."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import zlib

import cv2
import numpy as np
import pytest
import soundfile as sf

from cdml_edge.decode import DecodeError, decode, decode_image, decode_json, image_size


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


@pytest.mark.parametrize(
    ("member", "data"),
    [
        ("deep.json", b"[" * 200_000),
        ("deep.json", b'{"a":' * 200_000),
        ("deep.jsonl", b"{}\n" + b"[" * 200_000 + b"\n"),
        ("big.json", b"1" * 5000),  # over Python's int-digit limit
    ],
)
def test_json_bombs_raise_decode_error(member: str, data: bytes) -> None:
    with pytest.raises(DecodeError) as err:
        decode_json(data, member=member)
    assert err.value.member == member


def _wav(wave: np.ndarray, sr: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    out = io.BytesIO()
    sf.write(out, wave, sr, format=fmt, subtype=subtype)
    return out.getvalue()


def test_non_finite_audio_raises_decode_error() -> None:
    wave = np.zeros(4000, np.float32)
    wave[100] = np.nan
    data = _wav(wave, 8000, subtype="FLOAT")
    for opts in ({"sample_rate": 16000}, {"sample_rate": 8000}):  # resampled, then not
        with pytest.raises(DecodeError) as err:
            decode(data, "mic/nan.wav", **opts)
        assert err.value.member == "mic/nan.wav"


def _valid_samples() -> dict[str, bytes]:
    t = np.arange(4000) / 8000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    npy = io.BytesIO()
    np.save(npy, np.arange(12, dtype=np.float32).reshape(6, 2))
    npz = io.BytesIO()
    np.savez(npz, a=np.ones((4, 2)))
    return {
        "a.png": encoded(".png", 24, 16),
        "a.jpg": encoded(".jpg", 24, 16),
        "a.bmp": encoded(".bmp", 24, 16),
        "a.webp": encoded(".webp", 24, 16),
        "a.wav": _wav(tone, 8000),
        "a.flac": _wav(tone, 8000, "FLAC"),
        "a.ogg": _wav(tone, 8000, "OGG"),
        "a.csv": b"t,v,tag\n0,1.5,x\n1,2.5,y\n2,3.5,z\n",
        "a.npy": npy.getvalue(),
        "a.npz": npz.getvalue(),
        "a.json": json.dumps({"id": 1, "v": [1.5, 2.5], "s": "x"}).encode(),
        "a.jsonl": b'{"a": 1}\n{"a": 2}\n',
        "a.txt": "caf\u00e9 notes\n".encode(),
    }


@pytest.mark.parametrize("member", sorted(_valid_samples()))
def test_mutated_inputs_only_ever_raise_decode_error(member: str) -> None:
    """Truncations, bit flips and overwritten headers of real files of every modality."""
    good = _valid_samples()[member]
    decode(good, member, sample_rate=8000)  # the original decodes
    rng = np.random.default_rng(len(good))
    cases = [good[:n] for n in (0, 1, 4, 12, 30, len(good) // 2, len(good) - 1)]
    for _ in range(60):
        buf = bytearray(good)
        for pos in rng.integers(0, len(buf), size=int(rng.integers(1, 8))):
            buf[pos] = int(rng.integers(0, 256))
        cases.append(bytes(buf))
    cases += [b"\xff" * 64 + good[64:], good[:8] + b"\x00" * 64 + good[72:]]
    for data in cases:
        try:
            decode(data, member, sample_rate=8000)
        except DecodeError as err:
            assert err.member == member


@pytest.mark.parametrize(
    ("where", "data"),
    [
        ("labels.json", b"[" * 200_000),
        ("labels.json", b'{"a.jpg": ' + b"9" * 5000 + b"}"),
        ("labels.csv", b"name,label\na.jpg," + b"x" * 200_000 + b"\n"),
    ],
)
def test_hostile_label_files_raise_label_error(where: str, data: bytes) -> None:
    from cdml_edge.data.labels import LabelError, parse_mapping

    with pytest.raises(LabelError) as err:
        parse_mapping(data, where)
    assert err.value.where == where
