"""What a window member of each modality becomes before the model, and its warm-up sample.

:data:`MODEL_INPUTS` maps a modality to a :class:`ModalityInput`: how a member's bytes
are decoded for the model of that modality (with the options its input spec asks for),
whether the decoded rows may be cut into segments, and a small synthetic member whose
decoding pays the first-call costs (lazy imports) at start-up. A modality
without an entry (``binary``) has no decoder in a window.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from cdml_edge.decode import DECODERS, DecodeError
from cdml_edge.model.spec import (
    AudioInput,
    ImageInput,
    ModelInput,
    ModelSpecError,
    SeriesInput,
)

Decode = Callable[[bytes, str, ModelInput | None], np.ndarray | None]
Sample = Callable[[ModelInput | None], tuple[str, bytes]]


@dataclass(frozen=True)
class ModalityInput:
    """How members of one modality reach the model.

    ``decode(data, name, model_input)`` returns the array the model is given (``model_input``
    is ``None`` when no model scores the modality), or ``None`` for a modality that is only
    checked to decode. ``segmented``: rows of the array may be scored in ranges.
    ``warm_up_sample(model_input)`` gives ``(member name, bytes)`` of a tiny valid member.
    """

    decode: Decode
    segmented: bool = False
    warm_up_sample: Sample | None = None


def _image(data: bytes, name: str, inp: ModelInput | None) -> np.ndarray:
    size = (inp.width, inp.rows) if isinstance(inp, ImageInput) else None
    return DECODERS["image"](data, name, target_size=size)


def _audio(data: bytes, name: str, inp: ModelInput | None) -> np.ndarray:
    opts = inp.decode_kwargs() if isinstance(inp, AudioInput) else {}
    return DECODERS["audio"](data, name, **opts)


def _csv(data: bytes, name: str, inp: ModelInput | None) -> np.ndarray:
    """The numeric table; the model's ``columns``, in its order, when its spec names them."""
    table = DECODERS["csv"](data, name)
    if table.values.shape[0] == 0:
        raise DecodeError(name, "CSV has no data rows")
    if isinstance(inp, SeriesInput) and inp.columns:
        missing = [c for c in inp.columns if c not in table.columns]
        if missing:  # well-formed, not what the model takes: a model mismatch, no bad file
            raise ModelSpecError(f"{name}: CSV lacks the model's columns {missing}")
        cols = [table.columns.index(c) for c in inp.columns]
        return np.ascontiguousarray(table.values[:, cols])
    return table.values


def _timeseries(data: bytes, name: str, inp: ModelInput | None) -> np.ndarray:
    """``.npy`` / ``.npz`` arrays; a time series written as CSV is read as one."""
    if name.lower().endswith((".csv", ".tsv")):
        return _csv(data, name, inp)
    series = DECODERS["timeseries"](data, name)
    if series.shape[0] == 0:  # else padded with zeros to the model's window and scored
        raise DecodeError(name, "time series has no steps")
    if series.shape[1] == 0:
        raise DecodeError(name, "time series has no channels")
    return series


def _checked_only(modality: str) -> Decode:
    """Decode to find bad members; no model takes the value."""
    decoder = DECODERS[modality]

    def check(data: bytes, name: str, inp: ModelInput | None) -> None:
        decoder(data, name)
        return None

    return check


def _jpeg_sample(inp: ModelInput | None) -> tuple[str, bytes]:
    import cv2

    _, enc = cv2.imencode(".jpg", np.zeros((16, 16, 3), np.uint8))
    return "warmup.jpg", enc.tobytes()


def _wav_sample(inp: ModelInput | None) -> tuple[str, bytes]:
    """A quarter second of 440 Hz at the model's sample rate."""
    import soundfile as sf

    sr = inp.sample_rate if isinstance(inp, AudioInput) else 16000
    t = np.arange(sr // 4, dtype=np.float32) / sr
    buf = io.BytesIO()
    sf.write(buf, 0.1 * np.sin(2 * np.pi * 440 * t), sr, format="WAV")
    return "warmup.wav", buf.getvalue()


def _csv_sample(inp: ModelInput | None) -> tuple[str, bytes]:
    """One row of zeros under the model's columns."""
    cols = ["a"]
    if isinstance(inp, SeriesInput):
        cols = inp.columns or [f"c{i}" for i in range(inp.channels)]
    return "warmup.csv", (",".join(cols) + "\n" + ",".join("0" for _ in cols) + "\n").encode()


MODEL_INPUTS: Mapping[str, ModalityInput] = MappingProxyType(
    {
        "image": ModalityInput(_image, warm_up_sample=_jpeg_sample),
        "audio": ModalityInput(_audio, warm_up_sample=_wav_sample),
        "csv": ModalityInput(_csv, segmented=True, warm_up_sample=_csv_sample),
        "timeseries": ModalityInput(_timeseries, segmented=True, warm_up_sample=_csv_sample),
        "json": ModalityInput(_checked_only("json")),
        "text": ModalityInput(_checked_only("text")),
    }
)
"""Modality -> :class:`ModalityInput`, for every modality a source produces."""
