"""Bytes to arrays per modality, shared by the agent, replay and the dataset (no torch).

>>> from cdml_edge.decode import decode, modality_for
>>> modality_for("cam/0001.jpg")
'image'
"""

from __future__ import annotations

from typing import Any

from cdml_edge.modality import EXTENSIONS, MODALITIES, check_modality, modality_for

from .audio import decode_audio, mfcc, read_waveform
from .errors import DecodeError
from .image import DEFAULT_MAX_PIXELS, decode_image, image_size, jpeg_size, normalize_size, resize
from .tabular import CsvTable, TextData, decode_csv, decode_json, decode_text, decode_timeseries

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "EXTENSIONS",
    "MODALITIES",
    "CsvTable",
    "DecodeError",
    "TextData",
    "check_modality",
    "decode",
    "decode_audio",
    "decode_csv",
    "decode_image",
    "decode_json",
    "decode_text",
    "decode_timeseries",
    "image_size",
    "jpeg_size",
    "mfcc",
    "modality_for",
    "normalize_size",
    "read_waveform",
    "resize",
]

_OPTIONS: dict[str, frozenset[str]] = {
    "image": frozenset({"target_size", "reduced", "max_pixels"}),
    "audio": frozenset({"sample_rate", "mode", "n_mfcc", "hop_length", "n_fft"}),
    "csv": frozenset({"encoding"}),
    "timeseries": frozenset({"key"}),
    "json": frozenset({"encoding"}),
    "text": frozenset({"encoding"}),
    "binary": frozenset(),
}


def decode(
    data: bytes | bytearray | memoryview, name: str, modality: str | None = None, **opts: Any
) -> Any:
    """Decode ``data`` (the member ``name``) by ``modality`` (default: from the extension).

    Options that do not apply to the chosen modality are ignored, so one option set
    (say ``target_size`` and ``n_mfcc``) can be passed for a mixed archive.
    Returns: image ``ndarray`` uint8 H×W×3 RGB; audio ``ndarray`` float32; csv
    :class:`CsvTable`; timeseries ``ndarray`` float32 (steps, channels); json the parsed
    value; text :class:`TextData`; binary the bytes unchanged.
    """
    mod = check_modality(modality) if modality else modality_for(name)
    kw = {k: v for k, v in opts.items() if k in _OPTIONS[mod]}
    if mod == "image":
        return decode_image(data, member=name, **kw)
    if mod == "audio":
        return decode_audio(data, member=name, **kw)
    if mod == "csv":
        return decode_csv(data, member=name, **kw)
    if mod == "timeseries":
        return decode_timeseries(data, member=name, **kw)
    if mod == "json":
        return decode_json(data, member=name, **kw)
    if mod == "text":
        return decode_text(data, member=name, **kw)
    return bytes(data)
