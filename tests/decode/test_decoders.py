"""Decoders on real encoded bytes: JPEG/PNG via OpenCV, WAV/FLAC via soundfile, CSV, JSON, text."""

from __future__ import annotations

import io
import json
import pickle

import cv2
import numpy as np
import pytest
import soundfile as sf

from cdml_edge.decode import (
    CsvTable,
    DecodeError,
    decode,
    decode_audio,
    decode_csv,
    decode_image,
    decode_json,
    decode_text,
    decode_timeseries,
    jpeg_size,
    modality_for,
)


def _jpeg(rgb: np.ndarray, quality: int = 95) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
    )
    assert ok
    return buf.tobytes()


def _png(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return buf.tobytes()


def _halves(w: int, h: int) -> np.ndarray:
    """Left half pure red, right half pure blue: channel order is visible after decoding."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : w // 2] = (255, 0, 0)
    img[:, w // 2 :] = (0, 0, 255)
    return img


def _wav(wave: np.ndarray, sr: int, fmt: str = "WAV") -> bytes:
    out = io.BytesIO()
    sf.write(out, wave, sr, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/b.JPG", "image"),
        ("x.png", "image"),
        ("s.wav", "audio"),
        ("s.flac", "audio"),
        ("t.csv", "csv"),
        ("t.tsv", "csv"),
        ("v.npy", "timeseries"),
        ("m.json", "json"),
        ("m.jsonl", "json"),
        ("n.txt", "text"),
        ("blob.bin", "binary"),
        ("noext", "binary"),
    ],
)
def test_modality_for(name: str, expected: str) -> None:
    assert modality_for(name) == expected


def test_png_is_rgb_and_exact() -> None:
    img = _halves(40, 20)
    out = decode_image(_png(img))
    assert out.dtype == np.uint8 and out.shape == (20, 40, 3)
    np.testing.assert_array_equal(out, img)


def test_jpeg_rgb_order_and_resize() -> None:
    out = decode_image(_jpeg(_halves(64, 32)), target_size=(32, 16))
    assert out.shape == (16, 32, 3) and out.flags["C_CONTIGUOUS"]
    left, right = out[:, :10].mean(axis=(0, 1)), out[:, -10:].mean(axis=(0, 1))
    assert left[0] > 200 and left[2] < 50  # red on the left
    assert right[2] > 200 and right[0] < 50  # blue on the right


def test_int_target_is_square_and_grayscale_becomes_rgb() -> None:
    gray = np.full((30, 50), 128, np.uint8)
    ok, buf = cv2.imencode(".png", gray)
    out = decode_image(buf.tobytes(), target_size=24)
    assert out.shape == (24, 24, 3)
    assert int(out.min()) == int(out.max()) == 128


def test_jpeg_size_parser() -> None:
    assert jpeg_size(_jpeg(_halves(123, 45))) == (123, 45)
    assert jpeg_size(b"not a jpeg") is None


def test_reduced_decoding_matches_full_decode() -> None:
    rng = np.random.default_rng(0)
    base = cv2.resize(
        rng.integers(0, 255, (16, 16, 3), dtype=np.uint8),
        (800, 800),
        interpolation=cv2.INTER_LINEAR,
    )
    data = _jpeg(base)
    fast = decode_image(data, target_size=96, reduced=True)
    full = decode_image(data, target_size=96, reduced=False)
    assert fast.shape == full.shape == (96, 96, 3)
    assert np.abs(fast.astype(int) - full.astype(int)).mean() < 4
    # the reduced path really decodes fewer pixels: 800 / 8 = 100 >= 96
    reduced = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_COLOR_8)
    assert reduced.shape[:2] == (100, 100)


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_truncated_jpeg_raises(cut: float) -> None:
    data = _jpeg(_halves(64, 64))
    with pytest.raises(DecodeError) as err:
        decode_image(data[: int(len(data) * cut)], member="cam/7.jpg")
    assert err.value.member == "cam/7.jpg" and "cam/7.jpg" in str(err.value)


@pytest.mark.parametrize("data", [b"", b"garbage bytes", b"\x89PNG\r\n\x1a\n" + b"\0" * 20])
def test_bad_image_raises(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_image(data, member="x.png")


def test_truncated_png_raises() -> None:
    data = _png(np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    with pytest.raises(DecodeError):
        decode_image(data[: len(data) // 2], member="x.png")


def test_decode_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(DecodeError("m.wav", "bad")))
    assert (err.member, err.reason) == ("m.wav", "bad")


def test_audio_mfcc_shape_and_resampling() -> None:
    sr = 8000
    t = np.arange(sr) / sr  # one second
    wave = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    data = _wav(np.stack([wave, wave], axis=1), sr)  # stereo
    feats = decode_audio(data, sample_rate=16000, n_mfcc=13, hop_length=256)
    assert feats.dtype == np.float32 and feats.shape == (13, 1 + 16000 // 256)
    raw = decode_audio(data, sample_rate=16000, mode="waveform")
    assert raw.dtype == np.float32 and raw.ndim == 1 and abs(raw.shape[0] - 16000) <= 1
    assert 0.4 < float(np.abs(raw).max()) < 0.6


def test_flac_and_tone_energy() -> None:
    sr = 16000
    t = np.arange(sr // 2) / sr
    loud = _wav((0.8 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), sr, "FLAC")
    quiet = _wav((0.01 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), sr, "FLAC")
    # MFCC 0 is log energy: a louder tone has a higher first coefficient
    assert decode_audio(loud)[0].mean() > decode_audio(quiet)[0].mean() + 10


@pytest.mark.parametrize("data", [b"", b"RIFF\x00\x00\x00\x00WAVEjunk", b"this is not audio"])
def test_bad_audio_raises(data: bytes) -> None:
    with pytest.raises(DecodeError) as err:
        decode_audio(data, member="mic/1.wav")
    assert err.value.member == "mic/1.wav"


def test_csv_header_detected_and_text_columns() -> None:
    data = b"ts,temp,rpm\n2024-01-01T00:00,21.5,1200\n2024-01-01T00:01,,1210\n"
    table = decode_csv(data)
    assert isinstance(table, CsvTable) and table.has_header
    assert table.columns == ["temp", "rpm"] and table.values.dtype == np.float32
    assert table.values.shape == (2, 2) and np.isnan(table.values[1, 0])
    assert table.values[1, 1] == 1210
    assert table.text_columns == {"ts": ["2024-01-01T00:00", "2024-01-01T00:01"]}


def test_csv_without_header_and_semicolons() -> None:
    table = decode_csv(b"1;2;3\n4;5;6\n")
    assert not table.has_header and table.columns == ["col0", "col1", "col2"]
    np.testing.assert_array_equal(table.values, [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("data", [b"", b"a,b\n1,2\n3\n", b"a,b\n1,2\n3,x\n", b"\xff\xfe\x00bad"])
def test_malformed_csv_raises(data: bytes) -> None:
    with pytest.raises(DecodeError) as err:
        decode_csv(data, member="s/1.csv")
    assert err.value.member == "s/1.csv"


def test_timeseries_npy_npz_and_csv() -> None:
    arr = np.arange(12, dtype=np.float64).reshape(6, 2)
    npy = io.BytesIO()
    np.save(npy, arr)
    out = decode_timeseries(npy.getvalue())
    assert out.dtype == np.float32 and out.shape == (6, 2)
    npz = io.BytesIO()
    np.savez(npz, vib=np.arange(5))
    assert decode_timeseries(npz.getvalue()).shape == (5, 1)
    assert decode_timeseries(b"x,y\n1,2\n3,4\n").shape == (2, 2)
    with pytest.raises(DecodeError):
        decode_timeseries(b"\x93NUMPY garbage", member="v.npy")


def test_json_text_and_dispatch() -> None:
    assert decode_json(b'{"a": [1, 2]}') == {"a": [1, 2]}
    assert decode_json(b'{"a": 1}\n{"a": 2}\n', member="e.jsonl") == [{"a": 1}, {"a": 2}]
    with pytest.raises(DecodeError):
        decode_json(b"{bad", member="m.json")
    doc = decode_text(b"hello world\nsecond line here\n")
    assert doc.lines == ["hello world", "second line here"] and doc.word_count == 5
    with pytest.raises(DecodeError):
        decode_text(b"\xff\xfe\xfa", member="n.txt")
    assert decode(json.dumps([1]).encode(), "x.json") == [1]
    assert decode(b"\x00\x01", "blob.bin") == b"\x00\x01"
    # override the extension; options for other modalities are ignored
    assert decode(b"a b c", "weird.dat", modality="text", n_mfcc=13).word_count == 3
    with pytest.raises(ValueError):
        decode(b"", "x", modality="video")
