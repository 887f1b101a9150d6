"""Decoded arrays -> model input (shared by training and serving, torch-free).

:func:`prepare_batch` turns decoded arrays (from :mod:`cdml_edge.decode`) into the model
input; training uses the very same function, so there is no train/serve skew. Images are
fitted to the input size by the model's resize policy; :func:`image_geometry` says where the
input's pixels came from, so a detector's boxes map back to the source image.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cdml_edge.model.inputs import AudioInput, ImageInput, ModelSpecError, SeriesInput

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.model.spec import ModelSpec

LETTERBOX_FILL = 114  # grey of the letterbox bars, in 0-255 pixel values (as Ultralytics)


@dataclass(frozen=True)
class Geometry:
    """Input pixel ``(x, y)`` = source pixel ``(x * sx + px, y * sy + py)``.

    The source image has ``width`` × ``height`` pixels.
    """

    sx: float
    sy: float
    px: float
    py: float
    width: int
    height: int

    def to_source(self, box: np.ndarray) -> np.ndarray:
        """``(N, 4)`` x1, y1, x2, y2 boxes in input pixels -> source pixels (clipped)."""
        b = np.asarray(box, dtype=np.float64).reshape(-1, 4)
        out = np.empty_like(b)
        out[:, 0::2] = np.clip((b[:, 0::2] - self.px) / self.sx, 0, self.width)
        out[:, 1::2] = np.clip((b[:, 1::2] - self.py) / self.sy, 0, self.height)
        return out


def image_geometry(inp: ImageInput, height: int, width: int) -> Geometry:
    """How an image of ``width`` × ``height`` becomes the input (the ``resize`` policy)."""
    tw, th = inp.width, inp.rows
    if inp.resize == "stretch":
        return Geometry(tw / width, th / height, 0.0, 0.0, width, height)
    s = min(tw / width, th / height) if inp.resize == "letterbox" else max(tw / width, th / height)
    nw, nh = max(1, round(width * s)), max(1, round(height * s))
    if inp.resize == "letterbox":
        px, py = float((tw - nw) // 2), float((th - nh) // 2)
    else:
        px, py = -float((nw - tw) // 2), -float((nh - th) // 2)
    return Geometry(nw / width, nh / height, px, py, width, height)


def prepare_batch(spec: ModelSpec, decoded: Iterable[np.ndarray]) -> np.ndarray:
    """Decoded arrays -> model input ``(N, *spec.input.shape())``.

    float32, or ``uint8`` for an input of that type.

    Images: uint8 H×W×3 RGB (or H×W grey, or float in [0, 1]); audio: MFCC arrays
    ``(n_mfcc, T)``; series: float arrays ``(T, channels)``.
    """
    items = [prepare_item(spec, a) for a in decoded]
    return np.stack(items)


def prepare_item(spec: ModelSpec, array: np.ndarray) -> np.ndarray:
    """One decoded array -> ``spec.input.shape()`` (see :func:`prepare_batch`)."""
    inp = spec.input
    if isinstance(inp, ImageInput):
        return _prepare_image(inp, array)
    if isinstance(inp, AudioInput):
        return _prepare_audio(inp, array)
    return _prepare_series(inp, array)


def _as_rgb(img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 3 and a.shape[2] == 4:
        a = a[:, :, :3]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ModelSpecError(f"image: expected H×W or H×W×3 array, got shape {a.shape}")
    return a


def _unit(inp: ImageInput, a: np.ndarray) -> float:
    """What one 0-255 step is after scaling (1 for raw uint8 inputs)."""
    if inp.dtype == "uint8" or a.dtype != np.uint8:
        return 1.0 if a.dtype == np.uint8 else 1.0 / 255.0
    return inp.scale if inp.scale is not None else 1.0 / 255.0


def _prepare_image(inp: ImageInput, img: np.ndarray) -> np.ndarray:
    a = _as_rgb(img)
    unit = _unit(inp, a)
    pixels_first = _pixels_first(inp, a)
    if pixels_first:  # fit the 8-bit pixels, then convert: a quarter of the bytes to move
        a = _fit(inp, a, LETTERBOX_FILL)
    x = _scaled(inp, a, unit)
    if not pixels_first:  # the path of our own models: resize the scaled values
        x = _fit(inp, x, LETTERBOX_FILL * unit)
    x = _ordered(inp, x)
    if inp.channels == 1 and x.ndim == 3:
        x = np.asarray(x @ np.array([0.299, 0.587, 0.114], dtype=np.float32), dtype=np.float32)
    if x.ndim == 2:
        x = x[:, :, None] if inp.channels == 1 else np.repeat(x[:, :, None], 3, axis=2)
    return _laid_out(inp, _typed(inp, x), batch=False)


def stage_image(spec: ModelSpec, img: np.ndarray) -> np.ndarray | None:
    """The part of :func:`prepare_item` that differs per image, when the rest can wait.

    For an 8-bit RGB image and a three-channel image input: its pixels fitted to the input
    (8-bit, H×W×3), which :func:`finish_images` turns into model inputs a whole batch at a
    time, equal to :func:`prepare_item`'s (the same operation on every element). ``None``
    when the image takes :func:`prepare_item`'s path (another input, a grey or float image,
    or a stretched float input not already at its size, which is resized after scaling).
    Raises as :func:`prepare_item` does on an array of the wrong shape.
    """
    inp = spec.input
    if not isinstance(inp, ImageInput) or inp.channels != 3:
        return None
    a = _as_rgb(img)
    if a.dtype != np.uint8 or a.ndim != 3:
        return None
    if _pixels_first(inp, a):
        return _fit(inp, a, LETTERBOX_FILL)  # as prepare_item
    return a if a.shape[:2] == (inp.rows, inp.width) else None


def finish_images(spec: ModelSpec, staged: np.ndarray) -> np.ndarray:
    """Images of :func:`stage_image` (``N×H×W×3`` uint8) -> model input ``(N, *shape)``.

    The elementwise operations of :func:`prepare_item`, each once for the batch: an
    operation on a NumPy array lets go of the interpreter lock, and a thread of the agent
    that does so while others wait for it waits to take it back.
    """
    inp = spec.input
    if not isinstance(inp, ImageInput):
        raise ModelSpecError(f"finish_images: {spec.name!r} does not take images")
    x = _ordered(inp, _scaled(inp, staged, _unit(inp, staged)))
    return _laid_out(inp, _typed(inp, x), batch=True)


def _pixels_first(inp: ImageInput, a: np.ndarray) -> bool:
    """Whether the 8-bit pixels are fitted before they are scaled (else the scaled values)."""
    return a.dtype == np.uint8 and (inp.resize != "stretch" or inp.dtype == "uint8")


def _scaled(inp: ImageInput, a: np.ndarray, unit: float) -> np.ndarray:
    """Pixel values as float32, scaled to the input's unit."""
    if a.dtype != np.uint8:
        return a.astype(np.float32)
    if inp.scale is None and inp.dtype != "uint8":
        return a.astype(np.float32) / 255.0
    return a.astype(np.float32) * np.float32(unit)


def _ordered(inp: ImageInput, x: np.ndarray) -> np.ndarray:
    """The channels in the input's order (last axis; a grey image has none)."""
    return x[..., ::-1] if inp.order == "BGR" and x.ndim >= 3 else x


def _typed(inp: ImageInput, x: np.ndarray) -> np.ndarray:
    """Rounded to uint8, or normalised by the input's mean and std (last axis)."""
    if inp.dtype == "uint8":
        return np.clip(np.rint(x), 0, 255).astype(np.uint8)
    mean = np.asarray(inp.mean, dtype=np.float32)
    return np.asarray((x - mean) / np.asarray(inp.std, dtype=np.float32), dtype=np.float32)


def _laid_out(inp: ImageInput, x: np.ndarray, batch: bool) -> np.ndarray:
    """Channels moved first for NCHW (of one image, or of each image of a batch)."""
    if inp.layout == "NCHW":
        x = x.transpose(0, 3, 1, 2) if batch else x.transpose(2, 0, 1)
    return np.ascontiguousarray(x, dtype=np.uint8 if inp.dtype == "uint8" else np.float32)


def _fit(inp: ImageInput, x: np.ndarray, fill: float) -> np.ndarray:
    """``x`` fitted to the input size by the resize policy."""
    h, w = x.shape[:2]
    tw, th = inp.width, inp.rows
    if inp.resize == "stretch":
        return x if (w, h) == (tw, th) else _resize(x, tw, th)
    g = image_geometry(inp, h, w)
    nw, nh = round(w * g.sx), round(h * g.sy)
    r = _resize(x, nw, nh) if (nw, nh) != (w, h) else x
    if inp.resize == "center_crop":
        ox, oy = int(-g.px), int(-g.py)
        return np.ascontiguousarray(r[oy : oy + th, ox : ox + tw])
    canvas = np.full((th, tw, *r.shape[2:]), fill, dtype=r.dtype)
    px, py = int(g.px), int(g.py)
    canvas[py : py + nh, px : px + nw] = r
    return canvas


def _resize(x: np.ndarray, width: int, height: int) -> np.ndarray:
    import cv2  # appliance dependency; imported here to keep this module light

    shrinking = x.shape[0] > height or x.shape[1] > width
    interp = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    return np.asarray(cv2.resize(x, (width, height), interpolation=interp))


def _fit_length(x: np.ndarray, n: int) -> np.ndarray:
    """Crop (centre) or edge-pad axis 1 of a 2-D array to ``n``."""
    t = x.shape[1]
    if t == n:
        return x
    if t > n:
        start = (t - n) // 2
        return x[:, start : start + n]
    if t == 0:
        return np.zeros((x.shape[0], n), dtype=x.dtype)
    return np.pad(x, ((0, 0), (0, n - t)), mode="edge")


def _normalise(x: np.ndarray, mean: list[float] | None, std: list[float] | None) -> np.ndarray:
    if mean is None or std is None:
        return x
    m = np.asarray(mean, dtype=np.float32)[:, None]
    s = np.asarray(std, dtype=np.float32)[:, None]
    return (x - m) / s


def _prepare_audio(inp: AudioInput, mfcc: np.ndarray) -> np.ndarray:
    a = np.asarray(mfcc, dtype=np.float32)
    if a.ndim == 3 and a.shape[0] == 1:  # (1, n_mfcc, T)
        a = a[0]
    if a.ndim != 2:
        raise ModelSpecError(f"audio: expected MFCC array (n_mfcc, T), got shape {a.shape}")
    if a.shape[0] != inp.n_mfcc and a.shape[1] == inp.n_mfcc:
        a = a.T
    if a.shape[0] != inp.n_mfcc:
        raise ModelSpecError(f"audio: expected {inp.n_mfcc} MFCC coefficients, got {a.shape}")
    a = _fit_length(a, inp.frames)
    return np.ascontiguousarray(_normalise(a, inp.mean, inp.std), dtype=np.float32)


def _prepare_series(inp: SeriesInput, table: np.ndarray) -> np.ndarray:
    a = np.asarray(table, dtype=np.float32)
    if a.ndim == 1:
        a = a[None, :] if a.shape[0] == inp.channels else a[:, None]
    if a.ndim != 2:
        raise ModelSpecError(f"series: expected (rows, columns) array, got shape {a.shape}")
    if a.shape[1] != inp.channels:
        raise ModelSpecError(
            f"series: expected {inp.channels} columns, got {a.shape[1]}"
            + (
                f": name the {inp.channels} the model takes with models.<name>.input.columns"
                if a.shape[1] > inp.channels and not inp.columns
                else ""
            )
        )
    a = _fit_length(np.nan_to_num(a).T, inp.window)  # (channels, window)
    a = np.ascontiguousarray(_normalise(a, inp.mean, inp.std), dtype=np.float32)
    return a.reshape(-1) if inp.flat else a


def fit_input_stats(spec: ModelSpec, decoded: Iterable[np.ndarray]) -> ModelSpec:
    """Return ``spec`` with per-channel mean/std of audio/series input measured on ``decoded``.

    Statistics are taken on exactly what :func:`prepare_batch` produces without
    normalisation. Image specs are returned unchanged (their stats are fixed), without
    consuming ``decoded`` (so a generator of decoded items costs nothing for images).
    """
    inp = spec.input
    if isinstance(inp, ImageInput):
        return spec
    plain: dict[str, object] = {"mean": None, "std": None}
    if isinstance(inp, SeriesInput):
        plain["flat"] = False  # statistics per column, on (channels, window)
    raw_input = inp.model_copy(update=plain)
    raw = prepare_batch(spec.model_copy(update={"input": raw_input}), decoded)
    mean = raw.mean(axis=(0, 2))
    std = np.maximum(raw.std(axis=(0, 2)), 1e-6)
    new_input = inp.model_copy(
        update={"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
    )
    return spec.model_copy(update={"input": new_input})


__all__ = [
    "LETTERBOX_FILL",
    "Geometry",
    "finish_images",
    "fit_input_stats",
    "image_geometry",
    "prepare_batch",
    "prepare_item",
    "stage_image",
]
