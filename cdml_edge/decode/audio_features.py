"""MFCCs and resampling in numpy, scipy and soxr: librosa's numbers without its numba kernels.

librosa compiles numba kernels when it is imported (tens of seconds on a first start, more on
a Pi, and again whenever its cache is lost). The two things the audio decoder needs from it
are written here with the same definitions and defaults, so no JIT runs at all:

* :func:`mfcc` is ``librosa.feature.mfcc(y=..., sr=..., n_mfcc=..., hop_length=..., n_fft=...)``:
  a centred STFT (zero padding, periodic Hann window), the power spectrogram through a Slaney
  mel filter bank (128 bands, 0 Hz to Nyquist, Slaney-normalised), ``power_to_db`` (ref 1.0,
  amin 1e-10, top_db 80) and an orthonormal DCT-II;
* :func:`resample` is ``librosa.resample`` (``soxr_hq``, the length fixed to
  ``ceil(n * target / orig)``).

The tests compare both with librosa itself. The mel filter bank is built once per
``(sample rate, n_fft)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import scipy.fft

N_MELS = 128
AMIN = 1e-10
TOP_DB = 80.0


def resample(wave: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """``wave`` (mono float32) at ``target_sr``, as ``librosa.resample`` gives it."""
    import soxr

    if not np.isfinite(wave).all():
        raise ValueError("audio buffer is not finite everywhere")
    if orig_sr == target_sr:
        return wave
    size = math.ceil(wave.shape[0] * float(target_sr) / orig_sr)
    out = soxr.resample(wave, orig_sr, target_sr, quality="soxr_hq")
    if out.shape[0] > size:
        out = out[:size]
    elif out.shape[0] < size:
        out = np.pad(out, (0, size - out.shape[0]))
    return np.asarray(out, dtype=wave.dtype)


def mfcc(
    wave: np.ndarray,
    sample_rate: int,
    *,
    n_mfcc: int = 20,
    hop_length: int = 512,
    n_fft: int = 2048,
) -> np.ndarray:
    """MFCCs ``(n_mfcc, frames)`` of a mono float32 waveform (at least ``n_fft`` samples)."""
    if not np.isfinite(wave).all():
        raise ValueError("audio buffer is not finite everywhere")
    mel = _mel_spectrogram(wave, sample_rate, n_fft, hop_length)
    log_mel = 10.0 * np.log10(np.maximum(AMIN, mel))
    log_mel = np.maximum(log_mel, log_mel.max() - TOP_DB)
    return scipy.fft.dct(log_mel, axis=-2, type=2, norm="ortho")[:n_mfcc]


CHUNK_FRAMES = 512
"""STFT frames transformed at once: the windowed frames and their spectrum (about 10 MB at
``n_fft=2048``) stay this size however long the clip, only the mel rows grow with it."""


def _mel_spectrogram(wave: np.ndarray, sample_rate: int, n_fft: int, hop: int) -> np.ndarray:
    """The mel power spectrogram ``(N_MELS, frames)``, computed :data:`CHUNK_FRAMES` at a time."""
    padded = np.pad(wave, (n_fft // 2, n_fft // 2))
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    basis = _mel_basis_sparse(sample_rate, n_fft)
    out = np.empty((N_MELS, frames.shape[0]), np.float32)
    for start in range(0, frames.shape[0], CHUNK_FRAMES):
        part = frames[start : start + CHUNK_FRAMES]
        power = _power(part, n_fft)
        mel = basis @ power
        if not np.isfinite(mel).all():  # a power past float32: the dense bank's 0 * inf = NaN
            mel = _mel_basis(sample_rate, n_fft) @ power
        out[:, start : start + part.shape[0]] = mel
    return out


def _power(frames: np.ndarray, n_fft: int) -> np.ndarray:
    """``|STFT|**2`` ``(1 + n_fft // 2, len(frames))`` of windowed frames, float32.

    The frames are windowed into columns and transformed down the columns, so the spectrum
    comes out in the mel product's layout with no transpose; the FFT is scipy's, in single
    precision (numpy's is slower here, and double-only before numpy 2).
    """
    windowed = np.multiply(frames.T, _hann(n_fft)[:, None], dtype=np.float32)
    spectrum = scipy.fft.rfft(windowed, axis=0, overwrite_x=True)
    parts = spectrum.view(np.float32)  # re, im, re, im, ... along each row
    np.square(parts, out=parts)
    return parts[:, 0::2] + parts[:, 1::2]


@functools.lru_cache(maxsize=8)
def _mel_basis_sparse(sample_rate: int, n_fft: int) -> Any:
    """:func:`_mel_basis` as a sparse matrix: each band spans a few FFT bins.

    A power spectrum through it is 2,020 products per frame at 16 kHz / 2,048 instead of
    the dense basis's 131,200.
    """
    import scipy.sparse

    return scipy.sparse.csr_matrix(_mel_basis(sample_rate, n_fft))


@functools.lru_cache(maxsize=8)
def _hann(n_fft: int) -> np.ndarray:
    """The periodic Hann window (``scipy.signal.get_window('hann', n_fft)``)."""
    n = np.arange(n_fft)
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * n / n_fft)).astype(np.float32)


@functools.lru_cache(maxsize=8)
def _mel_basis(sample_rate: int, n_fft: int) -> np.ndarray:
    """``librosa.filters.mel(sr=sample_rate, n_fft=n_fft)``: Slaney scale and norm, float32."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mel_edges = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2.0), N_MELS + 2)
    mel_f = _mel_to_hz(mel_edges)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : N_MELS + 2] - mel_f[:N_MELS]))[:, None]
    out = weights.astype(np.float32)
    out.setflags(write=False)
    return out


_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    if hz >= _MIN_LOG_HZ:
        return _MIN_LOG_MEL + math.log(hz / _MIN_LOG_HZ) / _LOGSTEP
    return hz / _F_SP


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_hz_to_mel`, element-wise."""
    hz = _F_SP * mels
    log_part = mels >= _MIN_LOG_MEL
    hz[log_part] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels[log_part] - _MIN_LOG_MEL))
    return hz
