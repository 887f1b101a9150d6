"""Audio bytes (WAV / FLAC / OGG via soundfile) to MFCCs or a mono waveform.

Resampling and MFCCs are librosa's, computed without it (:mod:`.audio_features`).
"""

from __future__ import annotations

import io
from typing import Any, Literal

import numpy as np

from . import audio_features
from .errors import DecodeError
from .isolation import isolated, run_decode
from .limits import DecodeLimits, charged, current_limits

AudioMode = Literal["mfcc", "waveform"]


def read_waveform(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    sample_rate: int | None = 16000,
    limits: DecodeLimits | None = None,
) -> tuple[np.ndarray, int]:
    """Mono float32 waveform in [-1, 1] and its sample rate (resampled when asked).

    The header's frames, channels and sample rate are checked against ``limits`` (default:
    :func:`~.limits.current_limits`) before any sample is read: the duration, and the bytes
    the samples take as float32 before and after resampling.
    """
    import soundfile as sf

    if not data:
        raise DecodeError(member, "empty audio data")
    lim = limits or current_limits()
    buf = bytes(data)
    try:
        with sf.SoundFile(io.BytesIO(buf)) as f:
            frames, sr, cost = _check_header(
                member, f.frames, f.channels, f.samplerate, sample_rate, lim
            )
            if not isolated(lim, cost):
                with charged(cost):
                    return _samples(f, frames, sr, sample_rate, member)
    except DecodeError:
        raise
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        raise _undecodable(member, exc) from exc
    with charged(cost):  # in a decoder process, under limits.decode_deadline
        args = (buf, frames, sr, sample_rate, member)
        return run_decode(_read_samples, args, member=member, limits=lim, cost=cost)


def _undecodable(member: str, exc: Exception) -> DecodeError:
    # libsndfile's own words, without soundfile's "Error opening <_io.BytesIO object ...>"
    detail = getattr(exc, "error_string", None) or str(exc).split(">: ", 1)[-1]
    return DecodeError(member, f"not decodable audio: {detail}")


def _read_samples(
    buf: bytes, frames: int, sr: int, sample_rate: int | None, member: str
) -> tuple[np.ndarray, int]:
    """:func:`_samples` of ``buf`` opened afresh (what a decoder process runs)."""
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(buf)) as f:
            return _samples(f, frames, sr, sample_rate, member)
    except DecodeError:
        raise
    except Exception as exc:
        raise _undecodable(member, exc) from exc


def _samples(
    f: Any, frames: int, sr: int, sample_rate: int | None, member: str
) -> tuple[np.ndarray, int]:
    """At most ``frames`` frames of the open sound file ``f``, mono, resampled when asked."""
    samples = f.read(frames, dtype="float32", always_2d=True)
    if samples.shape[0] == 0:
        raise DecodeError(member, "audio has no samples")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if sample_rate is not None and sr != sample_rate:
        try:
            mono = audio_features.resample(mono, sr, sample_rate)
        except Exception as exc:  # non-finite samples, MemoryError
            raise DecodeError(member, f"resampling {sr} -> {sample_rate} Hz failed: {exc}") from exc
        sr = sample_rate
    return np.ascontiguousarray(mono, dtype=np.float32), int(sr)


def _check_header(
    member: str, frames: int, channels: int, sr: int, target: int | None, lim: DecodeLimits
) -> tuple[int, int, int]:
    """``(frames, sample rate, bytes to decode)`` the header claims, refused over ``lim``."""
    if sr <= 0 or channels <= 0:
        raise DecodeError(member, f"audio header claims {channels} channels at {sr} Hz")
    lim.check(member, "audio duration", round(frames / sr, 3), lim.max_audio_seconds, "seconds")
    out = frames if target is None else -(-frames * target // sr)
    cost = 4 * (frames * (channels + 1) + 2 * out)
    what = f"audio of {frames} frames x {channels} channels at {sr} Hz as float32"
    lim.check_bytes(member, what, cost)
    return frames, sr, cost


def decode_audio(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    sample_rate: int = 16000,
    mode: AudioMode = "mfcc",
    n_mfcc: int = 20,
    hop_length: int = 512,
    n_fft: int = 2048,
    limits: DecodeLimits | None = None,
) -> np.ndarray:
    """Decode audio to float32 MFCCs ``(n_mfcc, frames)`` or a 1-D waveform at ``sample_rate``.

    Multi-channel audio is mixed down to mono. Refused (``DecodeError``) when its header
    claims more than ``limits`` allow (see :func:`read_waveform`). Frames follow librosa's
    centred STFT:
    ``1 + max(len(waveform), n_fft) // hop_length``.
    """
    if mode not in ("mfcc", "waveform"):
        raise ValueError(f"mode must be 'mfcc' or 'waveform', got {mode!r}")
    wave, sr = read_waveform(data, member=member, sample_rate=sample_rate, limits=limits)
    if mode == "waveform":
        return wave
    return mfcc(wave, sr, member=member, n_mfcc=n_mfcc, hop_length=hop_length, n_fft=n_fft)


def mfcc(
    wave: np.ndarray,
    sample_rate: int,
    *,
    member: str = "",
    n_mfcc: int = 20,
    hop_length: int = 512,
    n_fft: int = 2048,
) -> np.ndarray:
    """MFCCs ``(n_mfcc, frames)`` of a mono waveform; short clips are zero-padded to ``n_fft``."""
    if wave.shape[0] < n_fft:  # as librosa is given it: one FFT window at least
        wave = np.pad(wave, (0, n_fft - wave.shape[0]))
    try:
        out = audio_features.mfcc(
            wave, sample_rate, n_mfcc=n_mfcc, hop_length=hop_length, n_fft=n_fft
        )
    except Exception as exc:  # non-finite samples, bad parameters
        raise DecodeError(member, f"MFCC failed: {exc}") from exc
    return np.ascontiguousarray(out, dtype=np.float32)
