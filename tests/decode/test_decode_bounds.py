"""Decoding bounded before the decode: headers that claim huge decodes are refused cheaply.

Each hostile file is built here (``helpers.hostile_media``) and decoded in a fresh process,
so the peak RSS and CPU a refusal costs are measured and bounded (before the limits these
took from 1 to 5 GB, or more than a minute of CPU).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import soundfile as sf
from helpers import hostile_media as hm
from helpers.paths import ROOT

from cdml_edge.config import AppConfig
from cdml_edge.decode import (
    UNLIMITED,
    DecodeError,
    DecodeLimits,
    current_limits,
    decode,
    decode_audio,
    decode_image,
    decode_timeseries,
    set_limits,
)
from cdml_edge.decode.limits import set_charge
from cdml_edge.intake.budget import ByteBudget

# (file name, member name, what the refusal says)
HOSTILE = [
    ("bomb.tif", "cam/bomb.tif", "16000x16000 = 256000000 pixels, over the limit of 40000000"),
    ("bomb.tif", "cam/bomb.jpg", "16000x16000 = 256000000 pixels, over the limit of 40000000"),
    ("tiles.tif", "cam/tiles.tif", "decoding this 100x100 tiff is 268495456 bytes"),
    ("hour.flac", "mic/hour.flac", "audio duration is 3600 seconds, over the limit of 600"),
    ("slow.wav", "mic/slow.wav", "audio duration is 1250 seconds, over the limit of 600"),
    ("zeros.npz", "line/zeros.npz", "268435456 cells, over the limit of 10000000"),
    ("scans.jpg", "cam/scans.jpg", "JPEG scan count is 2009 scans, over the limit of 32"),
]

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from cdml_edge.decode import decode
    import cv2, soundfile, soxr  # imports paid before measuring
    folder = Path(sys.argv[1])
    for line in sys.stdin:
        file, member = json.loads(line)
        data = (folder / file).read_bytes()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        try:
            decode(data, member, target_size=224)
            error = None
        except Exception as exc:
            error = [type(exc).__name__, getattr(exc, "member", None), str(exc)]
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        grown = (r1.ru_maxrss - r0.ru_maxrss) // 1024
        print(json.dumps({"member": member, "error": error, "mib": grown, "cpu": cpu}), flush=True)
    """
)


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "bomb.tif").write_bytes(hm.tiff_bomb())
    (folder / "tiles.tif").write_bytes(hm.tiff_big_tiles())
    (folder / "hour.flac").write_bytes(hm.flac_silence())
    (folder / "slow.wav").write_bytes(hm.wav_low_rate(20_000))
    (folder / "zeros.npz").write_bytes(hm.npz_zeros())
    (folder / "scans.jpg").write_bytes(hm.jpeg_repeated_scan())
    return folder


def test_hostile_headers_refused_with_bounded_memory_and_cpu(hostile_dir: Path) -> None:
    stdin = "".join(json.dumps([f, m]) + "\n" for f, m, _ in HOSTILE)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(hostile_dir)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {r["member"]: r for r in map(json.loads, proc.stdout.splitlines())}
    for _, member, says in HOSTILE:
        r = got[member]
        assert r["error"] is not None, f"{member} decoded: {r}"
        kind, named, message = r["error"]
        assert kind == "DecodeError" and named == member and says in message, r
        assert r["mib"] < 20, f"{member}: refusing it grew the peak RSS by {r['mib']} MiB"
        assert r["cpu"] < 0.5, f"{member}: refusing it took {r['cpu']:.2f} s of CPU"


@pytest.fixture
def limits() -> object:
    """Puts the process's limits back after a test changed them."""
    before = current_limits()
    yield before
    set_limits(before)


def _wav(seconds: float, sr: int, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    wave = np.zeros((int(seconds * sr), channels), np.int16)
    sf.write(buf, wave, sr, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def test_audio_limits_from_header(limits: object) -> None:
    short = _wav(12.5, 8)  # 100 samples at 8 Hz: resampled x2000 is 200,000 samples
    assert decode_audio(short, member="a.wav", mode="waveform").shape == (200_000,)
    with pytest.raises(DecodeError, match="12.5 seconds, over the limit of 10"):
        decode_audio(short, member="a.wav", limits=DecodeLimits(max_audio_seconds=10))
    set_limits(DecodeLimits(max_audio_seconds=10))  # the process's limits, as the agent sets
    with pytest.raises(DecodeError, match="a.wav: audio duration"):
        decode(short, "a.wav")
    assert decode(short, "a.wav", limits=UNLIMITED, mode="waveform").shape == (200_000,)
    set_limits(DecodeLimits(max_decoded_bytes=1_000_000))  # resampling x2000 is what costs
    with pytest.raises(DecodeError, match=r"float32 is \d+ bytes, over the limit of 1000000"):
        decode(short, "b.wav")


def test_image_limits_from_header() -> None:
    img = np.full((200, 300, 3), 90, np.uint8)
    progressive = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    assert decode_image(progressive).shape == (200, 300, 3)
    with pytest.raises(DecodeError, match="JPEG scan count is 10 scans, over the limit of 9"):
        decode_image(progressive, member="p.jpg", limits=DecodeLimits(max_jpeg_scans=9))
    tiff16 = cv2.imencode(".tiff", np.zeros((200, 300, 3), np.uint16))[1].tobytes()
    assert decode_image(tiff16).shape == (200, 300, 3)
    small = DecodeLimits(max_decoded_bytes=300 * 200 * 8)  # 16-bit RGB + RGB copy is 9 B/px
    strip = 300 * 4 * 4 * 2  # and a strip of 4 rows read as 16-bit RGBA
    with pytest.raises(DecodeError, match=f"decoding this 300x200 tiff is {540000 + strip} bytes"):
        decode_image(tiff16, member="t.tif", limits=small)
    with pytest.raises(DecodeError, match="over the limit of 59999"):
        decode_image(tiff16, limits=DecodeLimits(max_pixels=59_999))
    ppm16 = cv2.imencode(".ppm", np.zeros((200, 300, 3), np.uint16))[1].tobytes()  # maxval 65535
    with pytest.raises(DecodeError, match=f"300x200 pnm is {300 * 200 * 9} bytes"):
        decode_image(ppm16, limits=small)


def test_image_format_known_by_its_bytes_or_refused() -> None:
    gif = b"GIF89a" + bytes(100)
    with pytest.raises(DecodeError, match="not a decodable image") as err:
        decode(gif, "cam/x.jpg")
    assert err.value.member == "cam/x.jpg"
    tiff_named_jpg = cv2.imencode(".tiff", np.zeros((20, 30, 3), np.uint8))[1].tobytes()
    assert decode(tiff_named_jpg, "cam/y.jpg").shape == (20, 30, 3)


def test_array_limits_from_npy_header() -> None:
    arr = np.arange(1000, dtype=np.float64)
    npy = io.BytesIO()
    np.save(npy, arr)
    assert decode_timeseries(npy.getvalue()).shape == (1000, 1)
    with pytest.raises(DecodeError, match=r"shape \(1000,\) is 1000 cells, over the limit of 999"):
        decode_timeseries(npy.getvalue(), member="s.npy", limits=DecodeLimits(max_cells=999))
    with pytest.raises(DecodeError, match="as float64 and float32 is 12000 bytes"):
        decode_timeseries(npy.getvalue(), limits=DecodeLimits(max_decoded_bytes=11_999))
    npz = io.BytesIO()
    np.savez_compressed(npz, a=np.zeros(10), b=arr)
    assert decode_timeseries(npz.getvalue(), key="b").shape == (1000, 1)
    with pytest.raises(DecodeError, match=r"s.npz: entry b.npy: array of shape \(1000,\)"):
        decode_timeseries(
            npz.getvalue(), member="s.npz", key="b", limits=DecodeLimits(max_cells=999)
        )
    lying = io.BytesIO()  # the header claims a billion cells; the data holds a few
    with zipfile.ZipFile(lying, "w") as zf:
        zf.writestr("x.npy", hm.npy_header((10**9,)) + bytes(64))
    with pytest.raises(DecodeError, match="1000000000 cells"):
        decode_timeseries(lying.getvalue(), member="l.npz")


@pytest.mark.parametrize(
    ("member", "data", "says"),
    [
        ("t.csv", b"a,b\n" + b"1,2\n" * 600, "CSV is 1203 cells, over the limit of 1000"),
        ("t.json", b"[" + b"[]," * 600 + b"[]]", "JSON is 1203 cells, over the limit of 1000"),
        ("t.txt", b"word " * 1200, "text is 1201 cells, over the limit of 1000"),
    ],
)
def test_cells_counted_before_parsing(member: str, data: bytes, says: str) -> None:
    assert decode(data, member) is not None
    with pytest.raises(DecodeError, match=says) as err:
        decode(data, member, limits=DecodeLimits(max_cells=1000))
    assert err.value.member == member


def test_config_limits_are_the_decoders_defaults() -> None:
    """One policy: ``limits`` in the configuration defaults to what the decoders default to."""
    assert DecodeLimits.of(AppConfig().limits) == DecodeLimits()
    cfg = AppConfig.model_validate({"limits": {"max_pixels": 1000, "max_audio_seconds": "2m"}})
    got = DecodeLimits.of(cfg.limits)
    assert got.max_pixels == 1000 and got.max_audio_seconds == 120.0


def test_each_decode_holds_its_cost_on_the_installed_charge() -> None:
    """What the header says a decode allocates is taken before it and given back after."""
    budget = ByteBudget(1_000_000)
    budget.try_acquire(900_000)  # the budget nearly full: a decode still runs, over the cap
    set_charge(budget.take, budget.release)
    try:
        png = cv2.imencode(".png", np.zeros((200, 300, 3), np.uint8))[1].tobytes()
        assert decode_image(png).shape == (200, 300, 3)
        assert budget.peak == 900_000 + 300 * 200 * 6 and budget.used == 900_000
        taken: list[int] = []
        set_charge(lambda n: taken.append(n) or budget.take(n), budget.release)
        decode_audio(_wav(1.0, 8000), mode="waveform")  # 8000 frames read, 16000 resampled
        assert taken == [4 * (8000 * 2 + 2 * 16000)] and budget.used == 900_000
        set_charge(budget.take, budget.release)
        broken = png[:200]  # the header is whole, the data is not: refused after the charge
        with pytest.raises(DecodeError):
            decode_image(broken, member="cut.png")
        assert budget.used == 900_000 and not budget.try_acquire(200_000)
    finally:
        set_charge(None)
    assert decode_image(png).shape == (200, 300, 3) and budget.used == 900_000
