"""A CPU deadline per decode: large decodes in a decoder process that can be killed.

Real decodes of real images in a real child process: the same arrays as in-process, a
decode past its CPU deadline refused and its process killed, a crashed decoder refused,
a fresh process for the next decode, small decodes kept in-process.
"""

from __future__ import annotations

import os
import time

import cv2
import numpy as np
import pytest

from cdml_edge.decode import DecodeError, DecodeLimits, decode_image, isolation

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def big_progressive() -> bytes:
    """A 4000x3000 progressive JPEG of noise: a full decode takes several tenths of a second."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (3000, 4000, 3), dtype=np.uint8)
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1, cv2.IMWRITE_JPEG_QUALITY, 95]
    return cv2.imencode(".jpg", img, params)[1].tobytes()


def _isolating(deadline: float) -> DecodeLimits:
    return DecodeLimits(decode_deadline=deadline, isolate_decodes_over=0)


@pytest.mark.parametrize("target", [None, 224, (96, 64)])
def test_an_isolated_decode_gives_the_in_process_array(
    big_progressive: bytes, target: int | tuple[int, int] | None
) -> None:
    here = decode_image(big_progressive, member="a.jpg", target_size=target)
    there = decode_image(
        big_progressive, member="a.jpg", target_size=target, limits=_isolating(30.0)
    )
    assert there.dtype == here.dtype and there.shape == here.shape
    assert np.array_equal(there, here)


def test_a_png_decodes_the_same_in_a_decoder_process() -> None:
    img = np.arange(120 * 90 * 3, dtype=np.uint32).reshape(90, 120, 3).astype(np.uint8)
    png = cv2.imencode(".png", img)[1].tobytes()
    assert np.array_equal(
        decode_image(png, member="p.png", limits=_isolating(30.0)),
        decode_image(png, member="p.png"),
    )


def test_a_decode_past_its_deadline_is_abandoned_and_the_next_one_works(
    big_progressive: bytes,
) -> None:
    child = isolation._child()
    t0 = time.monotonic()
    with pytest.raises(DecodeError) as err:
        decode_image(big_progressive, member="slow.jpg", limits=_isolating(0.02))
    assert err.value.member == "slow.jpg"
    assert "more than 0.02 s of CPU (limits.decode_deadline); abandoned" in err.value.reason
    assert not child.alive()  # killed, not left decoding
    assert time.monotonic() - t0 < 30  # not waited out
    small = decode_image(big_progressive, member="ok.jpg", target_size=32, limits=_isolating(30))
    assert small.shape == (32, 32, 3)
    assert isolation._child() is not child  # a fresh process


def test_a_crashed_decoder_refuses_the_member_and_is_replaced() -> None:
    child = isolation._child()
    with pytest.raises(DecodeError) as err:
        child.call(os.abort, (), "crash.jpg", 30.0)
    assert err.value.member == "crash.jpg"
    assert "the decoder process died (killed by SIGABRT)" in err.value.reason
    assert isolation._child().call(os.getpid, (), "m", 30.0) != os.getpid()


def test_the_deadline_counts_cpu_not_waiting() -> None:
    child = isolation._child()
    assert child.call(time.sleep, (0.6,), "m", 0.2) is None  # 0.6 s asleep, no CPU
    assert child.alive()


def test_small_decodes_and_no_deadline_stay_in_process() -> None:
    assert not isolation.isolated(DecodeLimits(decode_deadline=5.0), 32 * MIB - 1)
    assert isolation.isolated(DecodeLimits(decode_deadline=5.0), 32 * MIB)
    assert isolation.isolated(DecodeLimits(), 32 * MIB)  # the agent's and the library's
    assert not isolation.isolated(DecodeLimits(decode_deadline=None), 10**12)
    args = ()
    pid = isolation.run_decode(os.getpid, args, member="m", limits=_isolating(5.0), cost=0)
    assert pid != os.getpid()
    no_deadline = DecodeLimits(decode_deadline=None)
    pid = isolation.run_decode(os.getpid, args, member="m", limits=no_deadline, cost=10**9)
    assert pid == os.getpid()


def test_an_error_in_the_decoder_process_is_the_members_decode_error() -> None:
    with pytest.raises(DecodeError) as err:
        decode_image(
            b"\xff\xd8\xff\xe0 not really" + b"\xff\xd9", member="x.jpg", limits=_isolating(5.0)
        )
    assert err.value.member == "x.jpg"


def test_audio_decodes_the_same_in_a_decoder_process_and_within_its_deadline() -> None:
    import io

    import soundfile as sf

    from cdml_edge.decode import read_waveform

    rng = np.random.default_rng(9)
    wave = (rng.standard_normal(44100 * 20) * 0.1).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, wave, 44100, format="FLAC")
    flac = buf.getvalue()
    here, sr_here = read_waveform(flac, member="a.flac")
    there, sr_there = read_waveform(flac, member="a.flac", limits=_isolating(30.0))
    assert sr_there == sr_here == 16000
    assert np.array_equal(there, here)
    long = io.BytesIO()
    sf.write(long, np.tile(wave, 15), 44100, format="FLAC")  # 300 s: tenths of a second
    with pytest.raises(DecodeError) as err:
        read_waveform(long.getvalue(), member="long.flac", limits=_isolating(0.001))
    assert "limits.decode_deadline" in err.value.reason


def test_a_large_csv_and_json_parse_the_same_in_a_decoder_process() -> None:
    from cdml_edge.decode import decode_csv, decode_json

    rows = "\n".join(f"{i},{i * 0.5},{i % 7}" for i in range(20_000))
    csv = ("a,b,c\n" + rows).encode()
    here = decode_csv(csv, member="t.csv")
    there = decode_csv(csv, member="t.csv", limits=_isolating(30.0))
    assert there.columns == here.columns and np.array_equal(there.values, here.values)
    doc = ("[" + ",".join(f'{{"k": {i}}}' for i in range(5_000)) + "]").encode()
    assert decode_json(doc, member="d.json", limits=_isolating(30.0)) == decode_json(doc)


def test_a_forked_process_starts_its_own_decoder_process() -> None:
    """A DataLoader worker forked from a process that had one must not share its pipes."""
    parent_child = isolation._child()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked side reports through the pipe
        ok = 0
        try:
            mine = isolation._child()
            ok = int(
                mine is not parent_child and mine.call(os.getppid, (), "m", 30.0) == os.getpid()
            )
        finally:
            os.write(write, bytes([ok]))
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"\x01"
    os.waitpid(pid, 0)
    assert parent_child.call(os.getppid, (), "m", 30.0) == os.getpid()
