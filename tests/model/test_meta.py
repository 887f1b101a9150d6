"""ModelSpec metadata round trip, input preparation and the demo-data generators."""

from __future__ import annotations

import numpy as np
import pytest

from cdml_edge import synth
from cdml_edge.decode import decode_audio, decode_csv, decode_image
from cdml_edge.model.spec import (
    AudioInput,
    ImageInput,
    ModelSpec,
    ModelSpecError,
    SeriesInput,
    fit_input_stats,
    prepare_batch,
)


def image_spec(**kw: object) -> ModelSpec:
    return ModelSpec(
        name="digits",
        modality="image",
        task="classifier",
        input=ImageInput(**kw),  # type: ignore[arg-type]
        labels=[str(i) for i in range(10)],
    )


def test_metadata_round_trip_keeps_every_field() -> None:
    spec = ModelSpec(
        name="vib",
        version="1.2.3",
        modality="timeseries",
        task="anomaly",
        input=SeriesInput(
            channels=3,
            window=256,
            columns=["ax", "ay", "az"],
            mean=[0.0, 0.1, 1.0],
            std=[0.5, 0.4, 0.2],
        ),
        labels=["fault", "normal"],
        anomaly_threshold=2.5,
    )
    meta = spec.to_metadata()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    assert meta["cdml.anomaly_threshold"] == "2.5"
    assert meta["cdml.input_shape"] == "[3, 256]"
    back = ModelSpec.from_metadata(meta)
    assert back == spec
    assert back.outputs == ["anomaly", "latent"]
    assert list(back.is_anomalous(np.array([2.0, 3.0]))) == [False, True]


def test_invalid_specs_name_the_problem() -> None:
    with pytest.raises(ValueError, match="anomaly_threshold"):
        ModelSpec(name="a", modality="audio", task="anomaly", input=AudioInput())
    with pytest.raises(ValueError, match="does not fit modality"):
        ModelSpec(name="a", modality="audio", task="classifier", input=ImageInput(), labels=["x"])
    with pytest.raises(ValueError, match="mean/std need 3"):
        ImageInput(mean=[0.5], std=[0.5])
    with pytest.raises(ModelSpecError, match="model.onnx: no 'cdml.spec'"):
        ModelSpec.from_metadata({"other": "x"}, "model.onnx")
    with pytest.raises(ModelSpecError, match="invalid"):
        ModelSpec.from_metadata({"cdml.spec": '{"name": ""}'}, "model.onnx")


def test_prepare_image_resizes_scales_and_normalises() -> None:
    spec = image_spec(size=32)
    white = np.full((64, 48, 3), 255, np.uint8)
    black = np.zeros((32, 32, 3), np.uint8)
    red = np.zeros((16, 16, 3), np.uint8)
    red[:, :, 0] = 255
    batch = prepare_batch(spec, [white, black, red])
    assert batch.shape == (3, 3, 32, 32) and batch.dtype == np.float32
    np.testing.assert_allclose(batch[0], 1.0, atol=1e-6)  # (1 - 0.5) / 0.5
    np.testing.assert_allclose(batch[1], -1.0, atol=1e-6)
    np.testing.assert_allclose(batch[2, 0], 1.0, atol=1e-6)  # channel 0 is R (NCHW, RGB)
    np.testing.assert_allclose(batch[2, 1:], -1.0, atol=1e-6)


def test_prepare_image_grey_and_single_channel() -> None:
    grey = np.full((32, 32), 128, np.uint8)
    rgb_out = prepare_batch(image_spec(size=32), [grey])
    assert rgb_out.shape == (1, 3, 32, 32)
    mono = image_spec(size=16, channels=1, mean=[0.0], std=[1.0])
    out = prepare_batch(mono, [np.full((32, 32, 3), 255, np.uint8)])
    assert out.shape == (1, 1, 16, 16)
    np.testing.assert_allclose(out, 1.0, atol=1e-5)
    with pytest.raises(ModelSpecError, match="image"):
        prepare_batch(mono, [np.zeros((4, 4, 2), np.uint8)])


def test_prepare_audio_fits_frames_and_orientation() -> None:
    spec = ModelSpec(
        name="a",
        modality="audio",
        task="anomaly",
        anomaly_threshold=1.0,
        input=AudioInput(n_mfcc=4, frames=6),
    )
    long = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    short = np.ones((4, 3), np.float32)
    out = prepare_batch(spec, [long, short, long.T])
    assert out.shape == (3, 4, 6)
    np.testing.assert_array_equal(out[0], long[:, 2:8])  # centre crop
    np.testing.assert_array_equal(out[1], 1.0)  # edge pad
    np.testing.assert_array_equal(out[2], out[0])  # (frames, n_mfcc) accepted
    with pytest.raises(ModelSpecError, match="4 MFCC"):
        prepare_batch(spec, [np.ones((5, 7), np.float32)])


def test_series_stats_normalise_prepared_input() -> None:
    rng = np.random.default_rng(0)
    tables = [
        rng.normal([1.0, -2.0], [3.0, 0.5], size=(50, 2)).astype(np.float32) for _ in range(20)
    ]
    spec = ModelSpec(
        name="s",
        modality="csv",
        task="classifier",
        labels=["a"],
        input=SeriesInput(channels=2, window=50),
    )
    fitted = fit_input_stats(spec, tables)
    assert fitted.input.mean is not None
    np.testing.assert_allclose(fitted.input.mean, [1.0, -2.0], atol=0.2)
    x = prepare_batch(fitted, tables)
    assert x.shape == (20, 2, 50)
    np.testing.assert_allclose(x.mean(axis=(0, 2)), 0.0, atol=1e-4)
    np.testing.assert_allclose(x.std(axis=(0, 2)), 1.0, atol=1e-3)
    with pytest.raises(ModelSpecError, match="2 columns"):
        prepare_batch(fitted, [np.ones((50, 3))])


@pytest.mark.slow
def test_synth_is_seeded_and_decodes() -> None:
    a_imgs, a_y = synth.digit_images(n=6, seed=3)
    b_imgs, b_y = synth.digit_images(n=6, seed=3)
    c_imgs, _ = synth.digit_images(n=6, seed=4)
    np.testing.assert_array_equal(a_imgs, b_imgs)
    np.testing.assert_array_equal(a_y, b_y)
    assert not np.array_equal(a_imgs, c_imgs)
    assert a_imgs.shape == (6, 64, 64, 3) and a_imgs.dtype == np.uint8
    np.testing.assert_array_equal(decode_image(synth.encode_png(a_imgs[0])), a_imgs[0])

    wav_n = synth.machine_audio(2, seed=1)
    assert wav_n == synth.machine_audio(2, seed=1)
    assert wav_n != synth.machine_audio(2, seed=1, fault=True)
    mf = decode_audio(wav_n[0], mode="mfcc", **AudioInput().decode_kwargs())
    assert mf.shape == (20, 32)

    csv = synth.vibration_csv(1, seed=2, fault=True)[0]
    table = decode_csv(csv)
    assert table.columns == list(synth.VIBRATION_COLUMNS)
    assert table.values.shape == (synth.VIBRATION_ROWS, 3)


def test_fault_signals_carry_more_high_frequency_energy() -> None:
    rng = np.random.default_rng(0)

    def hf(x: np.ndarray, rate: int, cut: float) -> float:
        spec = np.abs(np.fft.rfft(x, axis=0)) ** 2
        freqs = np.fft.rfftfreq(x.shape[0], 1 / rate)
        return float(spec[freqs > cut].sum() / spec.sum())

    normal = np.mean([hf(synth.machine_waveform(rng, False), 16000, 2000) for _ in range(20)])
    fault = np.mean([hf(synth.machine_waveform(rng, True), 16000, 2000) for _ in range(20)])
    assert fault > 2 * normal
    vn = np.mean([hf(synth.vibration_window(rng, False)[:, 0], 2000, 250) for _ in range(20)])
    vf = np.mean([hf(synth.vibration_window(rng, True)[:, 0], 2000, 250) for _ in range(20)])
    assert vf > 2 * vn
