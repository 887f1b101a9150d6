r"""The decoder table: one :class:`Decoder` per modality, and :func:`decode` dispatching on it.

>>> DECODERS["csv"](b"a,b\n1,2\n", "t.csv", target_size=32).values.tolist()
[[1.0, 2.0]]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cdml_edge.modality import check_modality, modality_for

from .audio import decode_audio
from .image import decode_image
from .tabular import decode_csv, decode_json, decode_text, decode_timeseries

Data = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Decoder:
    """How members of one modality are decoded.

    ``fn(data, member=..., **options)`` does the work; ``options`` are the keyword options
    it takes, with their defaults (read off its signature).
    """

    fn: Callable[..., Any]
    options: Mapping[str, Any]

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Decoder:
        """The decoder of ``fn``; its options are ``fn``'s keyword-only ones but ``member``."""
        params = inspect.signature(fn).parameters.values()
        opts = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
        opts.pop("member", None)
        return cls(fn, MappingProxyType(opts))

    def pick(self, opts: Mapping[str, Any]) -> dict[str, Any]:
        """The options of ``opts`` that apply to this decoder."""
        return {k: v for k, v in opts.items() if k in self.options}

    def __call__(self, data: Data, member: str = "", **opts: Any) -> Any:
        """Decode ``data`` (the member ``member``); options that do not apply are ignored."""
        return self.fn(data, member=member, **self.pick(opts))


def decode_binary(data: Data, *, member: str = "") -> bytes:
    """``binary`` members: the bytes unchanged."""
    return bytes(data)


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "image": Decoder.of(decode_image),
        "audio": Decoder.of(decode_audio),
        "csv": Decoder.of(decode_csv),
        "timeseries": Decoder.of(decode_timeseries),
        "json": Decoder.of(decode_json),
        "text": Decoder.of(decode_text),
        "binary": Decoder.of(decode_binary),
    }
)
"""Modality -> :class:`Decoder`, for every name of :data:`cdml_edge.modality.MODALITIES`."""


def decode(data: Data, name: str, modality: str | None = None, **opts: Any) -> Any:
    """Decode ``data`` (the member ``name``) by ``modality`` (default: from the extension).

    Options that do not apply to the chosen modality are ignored, so one option set
    (say ``target_size`` and ``n_mfcc``) can be passed for a mixed archive.
    Returns: image ``ndarray`` uint8 H×W×3 RGB; audio ``ndarray`` float32; csv
    :class:`~cdml_edge.decode.CsvTable`; timeseries ``ndarray`` float32 (steps, channels);
    json the parsed value; text :class:`~cdml_edge.decode.TextData`; binary the bytes unchanged.
    """
    mod = check_modality(modality) if modality else modality_for(name)
    return DECODERS[mod](data, name, **opts)
