"""The audio decoder's MFCCs and resampling give librosa's numbers, without librosa.

librosa is the reference here (a test dependency): the same clip through both, compared to
float32 rounding, over sample rates, FFT sizes, hops, coefficient counts, silence and clips
shorter than one FFT window.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from cdml_edge.decode import audio_features, decode_audio
from cdml_edge.decode.errors import DecodeError

librosa = pytest.importorskip("librosa")


def _clip(sample_rate: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / sample_rate
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 3100 * t)
    return (tone + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.mark.parametrize(
    ("sample_rate", "samples", "kwargs"),
    [
        (16000, 16000, {}),
        (22050, 30000, {"n_mfcc": 13, "hop_length": 256, "n_fft": 1024}),
        (8000, 2048, {"n_mfcc": 40}),
        (16000, 16000, {"n_fft": 512, "hop_length": 160}),
        (44100, 44100, {"n_mfcc": 64}),
        (16000, 20 * 16000, {}),  # 626 frames: two chunks of the STFT
        (16000, 16000, {"n_fft": 999, "hop_length": 250}),  # odd, not a power of two
    ],
)
def test_mfcc_is_librosas(sample_rate: int, samples: int, kwargs: dict) -> None:
    wave = _clip(sample_rate, samples)
    ours = audio_features.mfcc(wave, sample_rate, **kwargs)
    ref = librosa.feature.mfcc(y=wave, sr=sample_rate, **kwargs)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


def test_silence_and_a_loud_clip_hit_the_same_floors() -> None:
    """amin and top_db clip the log mel spectrogram as librosa does."""
    silent = np.zeros(16000, np.float32)
    np.testing.assert_array_equal(
        audio_features.mfcc(silent, 16000), librosa.feature.mfcc(y=silent, sr=16000)
    )
    spike = np.zeros(16000, np.float32)
    spike[8000] = 1.0
    ref = librosa.feature.mfcc(y=spike, sr=16000)
    np.testing.assert_allclose(
        audio_features.mfcc(spike, 16000), ref, atol=1e-4 * np.abs(ref).max()
    )


def test_a_spectrum_past_float32_gives_librosas_nans() -> None:
    """Samples so loud that the power overflows: the filter bank's zeros times inf, as librosa."""
    spike = np.zeros(4096, np.float32)
    spike[2048] = 1e20
    ours = audio_features.mfcc(spike, 16000)
    ref = librosa.feature.mfcc(y=spike, sr=16000)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(ref))


@pytest.mark.parametrize(("orig", "target"), [(44100, 16000), (8000, 16000), (22050, 22050)])
def test_resample_is_librosas(orig: int, target: int) -> None:
    wave = _clip(orig, orig // 2 + 7)
    ours = audio_features.resample(wave, orig, target)
    ref = librosa.resample(wave, orig_sr=orig, target_sr=target)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    np.testing.assert_allclose(ours, ref, atol=1e-6)


def test_a_short_wav_decodes_as_librosa_would_see_it_padded() -> None:
    """A clip shorter than one FFT window is zero-padded to it, then decoded."""
    wave = _clip(16000, 700)
    buf = io.BytesIO()
    sf.write(buf, wave, 16000, format="WAV", subtype="FLOAT")
    ours = decode_audio(buf.getvalue(), member="short.wav")
    ref = librosa.feature.mfcc(y=np.pad(wave, (0, 2048 - 700)), sr=16000)
    np.testing.assert_allclose(ours, ref, atol=1e-4 * np.abs(ref).max())


def test_non_finite_samples_are_a_decode_error_naming_the_member() -> None:
    wave = _clip(44100, 4410)
    wave[10] = np.nan
    buf = io.BytesIO()
    sf.write(buf, wave, 44100, format="WAV", subtype="FLOAT")
    with pytest.raises(DecodeError, match="nan.wav"):
        decode_audio(buf.getvalue(), member="nan.wav")
