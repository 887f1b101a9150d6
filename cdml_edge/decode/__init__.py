"""Bytes to arrays per modality, shared by the agent, replay and the dataset (no torch).

:data:`DECODERS` holds one decoder per modality; :func:`decode` dispatches through it.

>>> from cdml_edge.decode import decode, modality_for
>>> modality_for("cam/0001.jpg")
'image'
"""

from __future__ import annotations

from cdml_edge.modality import EXTENSIONS, MODALITIES, check_modality, modality_for

from .audio import decode_audio, mfcc, read_waveform
from .errors import DecodeError
from .image import DEFAULT_MAX_PIXELS, decode_image, image_size, jpeg_size, normalize_size, resize
from .limits import UNLIMITED, DecodeLimits, current_limits, set_limits
from .table import DECODERS, Decoder, decode, decode_binary
from .tabular import CsvTable, TextData, decode_csv, decode_json, decode_text, decode_timeseries

__all__ = [
    "DECODERS",
    "DEFAULT_MAX_PIXELS",
    "EXTENSIONS",
    "MODALITIES",
    "CsvTable",
    "DecodeError",
    "DecodeLimits",
    "UNLIMITED",
    "Decoder",
    "TextData",
    "check_modality",
    "current_limits",
    "decode",
    "decode_audio",
    "decode_binary",
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
    "set_limits",
]
