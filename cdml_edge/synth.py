"""Seeded generators of demo data (torch-free): digit images, machine audio, vibration.

The demo models in ``models/`` are trained on exactly these generators, and the demo
data for the agent comes from them too, so the models see in-distribution data.

* :func:`digit_images` — camera-like RGB frames of handwritten digits (scikit-learn's
  bundled digits when available, otherwise digits drawn with OpenCV fonts).
* :func:`machine_audio` — WAV bytes of a motor hum; faults add bearing-like impulses.
* :func:`vibration_series` / :func:`vibration_csv` — 3-axis accelerometer windows;
  faults add periodic impacts ringing at a structural resonance.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

AUDIO_SAMPLE_RATE = 16000
AUDIO_SECONDS = 1.0
VIBRATION_RATE = 2000
VIBRATION_ROWS = 256
VIBRATION_COLUMNS = ("ax", "ay", "az")


# -- digits ----------------------------------------------------------------------------------------


def load_digit_glyphs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """Grey digit glyphs in [0, 1] as ``(N, 8, 8)`` plus labels and the source name.

    scikit-learn's bundled 8×8 handwritten digits (1,797 images), shipped with this package
    (``_data/digits.npz``, see ``_data/DIGITS-NOTICE.txt``) so the appliance draws the same
    glyphs without scikit-learn. ``seed`` is kept for callers; the glyphs do not depend on it.
    """
    with np.load(Path(__file__).parent / "_data" / "digits.npz") as data:
        glyphs = data["images"].astype(np.float32) / np.float32(16.0)
        labels = data["labels"].astype(np.int64)
    return glyphs.clip(0.0, 1.0), labels, "sklearn-digits"


PRINTED_FONTS = 16  # 8 Hershey faces, upright and italic


def printed_digit_glyphs(n: int, seed: int, size: int = 28) -> tuple[np.ndarray, np.ndarray]:
    """``n`` printed digits: every Hershey face, upright or italic, strokes 1-4 px wide.

    Grey glyphs in [0, 1] ``(n, size, size)`` and their labels; each is as large as the
    canvas allows, as a digit cropped from a label or a display would be.
    """
    import cv2

    faces = [0, 1, 2, 3, 4, 5, 6, 7]  # FONT_HERSHEY_SIMPLEX ... FONT_HERSHEY_SCRIPT_COMPLEX
    rng = np.random.default_rng(seed)
    glyphs = np.zeros((n, size, size), dtype=np.float32)
    labels = rng.integers(0, 10, size=n)
    for i, d in enumerate(labels):
        style = int(rng.integers(PRINTED_FONTS))
        font = faces[style % 8] | (cv2.FONT_ITALIC if style >= 8 else 0)
        thick = int(rng.integers(1, 5))
        big = np.zeros((4 * size, 4 * size), dtype=np.uint8)
        (w, h), base = cv2.getTextSize(str(d), font, 3.0, thick * 3)
        org = ((4 * size - w) // 2, (4 * size + h) // 2)
        cv2.putText(big, str(int(d)), org, font, 3.0, 255, thick * 3, cv2.LINE_AA)
        ys, xs = np.nonzero(big)
        crop = big[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
        side = max(crop.shape) + 8  # a margin, the digit centred in a square
        square = np.zeros((side, side), dtype=np.uint8)
        y0, x0 = (side - crop.shape[0]) // 2, (side - crop.shape[1]) // 2
        square[y0 : y0 + crop.shape[0], x0 : x0 + crop.shape[1]] = crop
        glyphs[i] = cv2.resize(square, (size, size), interpolation=cv2.INTER_AREA) / 255.0
    return glyphs, labels.astype(np.int64)


PRINTED_TEST_SEED = 4242  # never a training seed


def printed_digits_test(n: int = 200, size: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The printed-digit test set: frames, labels, and which are light ink on dark ground.

    ``n`` printed digits (:func:`printed_digit_glyphs`) rendered as camera frames, every
    other one inverted, from :data:`PRINTED_TEST_SEED`.
    """
    glyphs, labels = printed_digit_glyphs(n, PRINTED_TEST_SEED)
    rng = np.random.default_rng(PRINTED_TEST_SEED + 1)
    inverted = np.arange(n) % 2 == 1
    frames = np.stack(
        [render_digit(g, rng, size, bool(inv)) for g, inv in zip(glyphs, inverted, strict=True)]
    )
    return frames, labels, inverted


def render_digit(
    glyph: np.ndarray, rng: np.random.Generator, size: int = 64, inverted: bool = False
) -> np.ndarray:
    """One glyph (grey, [0, 1]) -> camera-like uint8 ``size``×``size``×3 RGB frame.

    Random paper and ink colours, a small shift and scale, blur and sensor noise; with
    ``inverted``, light ink on a dark ground (the same random draws).
    """
    import cv2

    g = cv2.resize(glyph.astype(np.float32), (size, size), interpolation=cv2.INTER_CUBIC)
    g = np.clip(g, 0.0, 1.0)
    scale = float(rng.uniform(0.8, 1.0))
    angle = float(rng.uniform(-10, 10))
    shift = rng.uniform(-0.06, 0.06, size=2) * size
    m = np.asarray(cv2.getRotationMatrix2D((size / 2, size / 2), angle, scale), dtype=np.float64)
    m[:, 2] += shift
    g = cv2.warpAffine(g, m, (size, size), borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)
    paper = rng.uniform(0.65, 1.0, size=3)
    ink = rng.uniform(0.0, 0.35, size=3)
    if inverted:
        paper, ink = ink, paper
    ink_mask = g[:, :, None]
    img: np.ndarray = paper[None, None, :] * (1.0 - ink_mask) + ink[None, None, :] * ink_mask
    shade = np.linspace(rng.uniform(0.85, 1.0), rng.uniform(0.85, 1.0), size, dtype=np.float32)
    img = img * shade[None, :, None]
    img = np.asarray(cv2.GaussianBlur(img.astype(np.float32), (3, 3), float(rng.uniform(0.1, 1.0))))
    img = img + rng.normal(0.0, 0.02, size=img.shape)
    return np.asarray(np.clip(img * 255.0, 0, 255).round(), dtype=np.uint8)


def digit_images(
    n: int | None = None, seed: int = 0, size: int = 64, indices: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Camera-like RGB digit frames ``(N, size, size, 3)`` uint8 and labels ``(N,)``.

    ``indices`` selects glyphs from :func:`load_digit_glyphs` (for train/test splits);
    otherwise ``n`` glyphs are drawn at random (all of them when ``n`` is None).
    """
    glyphs, labels, _ = load_digit_glyphs(seed)
    rng = np.random.default_rng(seed)
    if indices is None:
        indices = np.arange(len(glyphs)) if n is None else rng.integers(0, len(glyphs), size=n)
    images = np.stack([render_digit(glyphs[i], rng, size) for i in indices])
    return images, labels[indices]


def split_glyphs(
    labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class split of glyph indices into sorted ``(train, test)`` arrays."""
    rng = np.random.default_rng(seed)
    train: list[int] = []
    test: list[int] = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(len(idx) * test_fraction))
        test.extend(idx[:k].tolist())
        train.extend(idx[k:].tolist())
    return np.array(sorted(train)), np.array(sorted(test))


def digits_heldout(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits model's split: ``(train indices, test indices, test frames, test labels)``.

    Test glyphs are never rendered for training; their frames use their own render seed.
    """
    _, labels, _ = load_digit_glyphs(seed)
    train, test = split_glyphs(labels, 0.2, seed)
    images, ys = digit_images(seed=seed * 100 + 99, indices=test)
    return train, test, images, ys


ANOMALY_HELDOUT_SEED_OFFSET = 1000
ANOMALY_HELDOUT_ITEMS = 200  # per class


def anomaly_heldout(
    make: Callable[[int, int, bool], list[bytes]], seed: int = 0, n: int = ANOMALY_HELDOUT_ITEMS
) -> tuple[list[bytes], list[bytes]]:
    """Held-out ``(normal, fault)`` members of an anomaly model trained with ``seed``.

    ``make`` is :func:`machine_audio` or :func:`vibration_csv`: fresh, unseen clips.
    """
    test_seed = seed + ANOMALY_HELDOUT_SEED_OFFSET
    return make(n, test_seed, False), make(n, test_seed, True)


def encode_png(image: np.ndarray) -> bytes:
    """RGB uint8 image -> PNG bytes."""
    import cv2

    ok, buf = cv2.imencode(".png", image[:, :, ::-1])
    if not ok:  # pragma: no cover - OpenCV always encodes a valid uint8 image
        raise ValueError("PNG encoding failed")
    return bytes(buf)


# -- machine audio ---------------------------------------------------------------------------------


def machine_waveform(
    rng: np.random.Generator,
    fault: bool,
    sample_rate: int = AUDIO_SAMPLE_RATE,
    seconds: float = AUDIO_SECONDS,
) -> np.ndarray:
    """Float32 waveform in [-1, 1] of a running motor; ``fault`` adds bearing impulses."""
    n = int(sample_rate * seconds)
    t = np.arange(n, dtype=np.float64) / sample_rate
    f0 = rng.uniform(45.0, 60.0)  # mains-like hum
    wave_ = np.zeros(n)
    for k, amp in enumerate((1.0, 0.5, 0.3, 0.15), start=1):
        wave_ += amp * rng.uniform(0.7, 1.3) * np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 6.3))
    blade = rng.uniform(300.0, 500.0)  # fan / gear whine
    wave_ += 0.1 * np.sin(2 * np.pi * blade * t)
    wave_ += rng.normal(0.0, rng.uniform(0.05, 0.15), size=n)
    if fault:
        rate = rng.uniform(15.0, 40.0)  # impacts per second (bearing defect frequency)
        resonance = rng.uniform(2500.0, 4500.0)
        decay = rng.uniform(300.0, 600.0)
        strength = rng.uniform(0.15, 2.0)
        length = int(0.02 * sample_rate)
        tau = np.arange(length) / sample_rate
        ring = np.sin(2 * np.pi * resonance * tau) * np.exp(-decay * tau)
        start = rng.uniform(0, 1.0 / rate)
        for s in np.arange(start, seconds, 1.0 / rate):
            i = int(s * sample_rate)
            seg = min(length, n - i)
            wave_[i : i + seg] += strength * rng.uniform(0.6, 1.4) * ring[:seg]
    wave_ *= rng.uniform(0.6, 1.0) / max(float(np.max(np.abs(wave_))), 1e-9)
    return wave_.astype(np.float32)


def wav_bytes(samples: np.ndarray, sample_rate: int = AUDIO_SAMPLE_RATE) -> bytes:
    """Mono float waveform in [-1, 1] -> 16-bit PCM WAV bytes."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def machine_audio(
    n: int, seed: int = 0, fault: bool = False, sample_rate: int = AUDIO_SAMPLE_RATE
) -> list[bytes]:
    """``n`` one-second WAV clips of a motor, normal or with a bearing fault."""
    rng = np.random.default_rng([seed, int(fault), 1])
    return [wav_bytes(machine_waveform(rng, fault, sample_rate), sample_rate) for _ in range(n)]


# -- vibration -------------------------------------------------------------------------------------


def vibration_window(
    rng: np.random.Generator, fault: bool, rows: int = VIBRATION_ROWS, rate: int = VIBRATION_RATE
) -> np.ndarray:
    """One accelerometer window ``(rows, 3)`` in g; ``fault`` adds periodic ringing impacts."""
    t = np.arange(rows, dtype=np.float64) / rate
    shaft = rng.uniform(20.0, 35.0)  # shaft rotation in Hz
    out = np.zeros((rows, 3))
    gains = (1.0, 0.7, 0.3)
    for c, gain in enumerate(gains):
        for k, amp in enumerate((0.5, 0.15, 0.05), start=1):
            phase = rng.uniform(0, 2 * np.pi)
            amp_k = gain * amp * rng.uniform(0.8, 1.2)
            out[:, c] += amp_k * np.sin(2 * np.pi * k * shaft * t + phase)
        out[:, c] += rng.normal(0.0, 0.05, size=rows)
    out[:, 2] += 1.0  # gravity on z
    if fault:
        period = 1.0 / (shaft * rng.uniform(3.0, 5.0))  # outer-race defect frequency
        resonance = rng.uniform(300.0, 600.0)
        tau = np.arange(rows) / rate
        strength = rng.uniform(0.1, 1.0)
        for s in np.arange(rng.uniform(0, period), rows / rate, period):
            i = int(s * rate)
            ring = np.sin(2 * np.pi * resonance * tau[: rows - i]) * np.exp(-80.0 * tau[: rows - i])
            out[i:, 0] += strength * ring
            out[i:, 1] += 0.6 * strength * ring
    return out.astype(np.float32)


def vibration_series(n: int, seed: int = 0, fault: bool = False) -> Iterator[np.ndarray]:
    """``n`` accelerometer windows ``(rows, 3)`` float32."""
    rng = np.random.default_rng([seed, int(fault), 2])
    for _ in range(n):
        yield vibration_window(rng, fault)


def csv_bytes(table: np.ndarray, columns: tuple[str, ...] = VIBRATION_COLUMNS) -> bytes:
    """Float table -> CSV bytes with a header row."""
    buf = io.StringIO()
    buf.write(",".join(columns) + "\n")
    np.savetxt(buf, table, delimiter=",", fmt="%.5f")
    return buf.getvalue().encode()


def vibration_csv(n: int, seed: int = 0, fault: bool = False) -> list[bytes]:
    """``n`` accelerometer windows as CSV bytes (header ``ax,ay,az``)."""
    return [csv_bytes(w) for w in vibration_series(n, seed, fault)]
