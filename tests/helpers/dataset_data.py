"""Real test archives for the dataset tests: JPEG class folders, audio, CSV, JSON, text."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import soundfile as sf

from cdml_edge.archive import write_archive

# class -> RGB colour of its images; the colour survives JPEG, so labels are checkable
COLOURS = {"cat": (220, 30, 30), "dog": (30, 30, 220), "eel": (30, 200, 30)}


def jpeg(rgb: np.ndarray, quality: int = 92) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
    )
    assert ok
    return buf.tobytes()


def class_images(per_class: int = 4, size: tuple[int, int] = (48, 32)) -> list[tuple[str, bytes]]:
    """``pets/<class>/<i>.jpg`` members: solid class colour plus a little per-image noise."""
    rng = np.random.default_rng(7)
    w, h = size
    items = []
    for cls, colour in COLOURS.items():
        for i in range(per_class):
            img = np.empty((h, w, 3), np.uint8)
            img[:] = colour
            img = np.clip(img + rng.integers(-10, 10, img.shape), 0, 255).astype(np.uint8)
            items.append((f"pets/{cls}/{i:02d}.jpg", jpeg(img)))
    return items


def wav(seconds: float, freq: float, sr: int = 16000) -> bytes:
    t = np.arange(int(seconds * sr)) / sr
    out = io.BytesIO()
    sf.write(out, (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32), sr, format="WAV")
    return out.getvalue()


def write(path: Path, items: list[tuple[str, bytes]]) -> Path:
    write_archive(path, items)
    return path
