"""What a decoded member becomes as a dataset sample, per modality (the torch side).

:data:`SAMPLES` maps each modality to a :class:`SampleKind`: the value a ``transform``
receives (a CSV's numeric values, a text's string), the axis along which items of the
modality differ in length (padded or trimmed to ``fixed_length``, or to the longest item
of a batch), and the default sample when there is no ``transform`` (a tensor, JSON text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import torch


def fit_length(arr: np.ndarray, length: int, axis: int) -> np.ndarray:
    """Zero-pad or trim ``arr`` along ``axis`` to exactly ``length``."""
    n = arr.shape[axis]
    if n == length:
        return arr
    if n > length:
        return np.take(arr, np.arange(length), axis=axis)
    pad = [(0, 0)] * arr.ndim
    pad[axis] = (0, length - n)
    return np.pad(arr, pad)


def image_to_tensor(rgb: np.ndarray) -> torch.Tensor:
    """uint8 ``H×W×3`` -> float32 ``3×H×W`` in [0, 1]."""
    out = rgb.transpose(2, 0, 1).astype(np.float32)  # numpy: no intra-op thread pool
    out /= 255.0
    return torch.from_numpy(out)


def array_to_tensor(arr: np.ndarray) -> torch.Tensor:
    """A float32 array as a tensor (sharing memory when it is contiguous)."""
    return torch.from_numpy(np.ascontiguousarray(arr))


def json_text(value: Any) -> str:
    """Parsed JSON re-serialised.

    Records of different keys or shapes cannot be collated key by key; strings collate as a
    list.
    """
    return json.dumps(value, ensure_ascii=False)


def _same(value: Any) -> Any:
    return value


def _table_values(table: Any) -> np.ndarray:
    """A :class:`~cdml_edge.decode.CsvTable`'s numeric values ``(rows, columns)``."""
    return np.asarray(table.values)


def _text_string(text: Any) -> str:
    """A :class:`~cdml_edge.decode.TextData`'s text."""
    return str(text.text)


@dataclass(frozen=True)
class SampleKind:
    """How a decoded member of one modality becomes a sample."""

    value: Callable[[Any], Any] = _same
    """Decoded -> what ``transform`` receives."""
    length_axis: int | None = None
    """The axis of variable length (``None``: items have no length to fit)."""
    default: Callable[[Any], Any] = _same
    """Value -> the sample when there is no ``transform``."""


SAMPLES: Mapping[str, SampleKind] = MappingProxyType(
    {
        "image": SampleKind(default=image_to_tensor),
        "audio": SampleKind(length_axis=-1, default=array_to_tensor),
        "csv": SampleKind(value=_table_values, length_axis=0, default=array_to_tensor),
        "timeseries": SampleKind(length_axis=0, default=array_to_tensor),
        "json": SampleKind(default=json_text),
        "text": SampleKind(value=_text_string),
        "binary": SampleKind(),
    }
)
"""Modality -> :class:`SampleKind`, for every name of :data:`cdml_edge.modality.MODALITIES`."""


def pad_batch(items: list[Any], axis: int, *, labelled: bool) -> list[Any]:
    """Zero-pad the tensors of one batch to its longest item along ``axis``."""
    xs: list[torch.Tensor] = [it[0] for it in items] if labelled else list(items)
    longest = max(x.shape[axis] for x in xs)
    if all(x.shape[axis] == longest for x in xs):
        return items
    padded = [torch.from_numpy(fit_length(x.numpy(), longest, axis)) for x in xs]
    if labelled:
        return [(x, it[1]) for x, it in zip(padded, items, strict=True)]
    return padded
