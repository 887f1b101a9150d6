"""cdmltrain 1.1.4's shapes of decoded members, for the live loader (numpy, no torch).

The members are those of :class:`~cdml_edge.data.live_loader.LiveBatchLoader`; the shapes are
lists in archive order, rows and records as plain dicts.

Each function takes the ``{member: value}`` form the decoders give and returns cdmltrain's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cdml_edge.decode import CsvTable, TextData

Record = dict[str, Any]


def pil_images(arrays: Mapping[str, np.ndarray]) -> list[Any]:
    """``PIL.Image`` (RGB) per image member; needs Pillow (the ``full`` extra, not the core)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            "get_images() gives PIL images and needs Pillow: pip install 'cdml-edge[full]',"
            " or get_images(as_pil=False) for uint8 arrays"
        ) from exc
    return [Image.fromarray(a, mode="RGB") for a in arrays.values()]


def audio_records(
    arrays: Mapping[str, np.ndarray], sample_rate: int, mode: str = "mfcc"
) -> list[Record]:
    """One record per audio member.

    Its MFCCs ``(n_mfcc, frames)`` and their mean over time (``mode="mfcc"``), or its samples
    and duration (``mode="waveform"``).
    """
    if mode != "mfcc":
        return [
            {
                "filename": name,
                "waveform": w,
                "sample_rate": sample_rate,
                "duration_s": len(w) / sample_rate,
            }
            for name, w in arrays.items()
        ]
    return [
        {
            "filename": name,
            "mfcc": m,
            "mfcc_mean": m.mean(axis=1) if m.size else np.zeros(m.shape[0], np.float32),
            "sample_rate": sample_rate,
            "frames": int(m.shape[1]),
        }
        for name, m in arrays.items()
    ]


def csv_rows(tables: Mapping[str, CsvTable]) -> list[Record]:
    """Every row of every CSV member as ``{column: value}``.

    Numbers as ``float`` (an empty cell is NaN), all-text columns as ``str``.
    """
    rows: list[Record] = []
    for table in tables.values():
        values = table.values.tolist()
        for i, row in enumerate(values):
            rec: Record = dict(zip(table.columns, row, strict=True))
            rec.update({col: cells[i] for col, cells in table.text_columns.items()})
            rows.append(rec)
    return rows


def flatten(obj: Any, prefix: str = "", sep: str = ".") -> Record:
    """Nested dicts and lists as one flat dict: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    if not isinstance(obj, (dict, list)):
        return {prefix: obj}
    pairs = obj.items() if isinstance(obj, dict) else enumerate(obj)
    out: Record = {}
    for k, v in pairs:
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, (dict, list)) and v:
            out.update(flatten(v, key, sep))
        else:
            out[key] = v
    return out


def json_records(values: Mapping[str, Any], flat: bool = False) -> list[Any]:
    """One entry per JSON value.

    A top-level array gives one entry per element, a scalar ``{"value": x}``; with ``flat``
    every dict or array entry is flattened.
    """
    out: list[Any] = []
    for value in values.values():
        entries = value if isinstance(value, list) else [value]
        for e in entries:
            if not isinstance(e, (dict, list)):
                out.append({"value": e} if not isinstance(value, list) else e)
            else:
                out.append(flatten(e) if flat else e)
    return out


def text_records(texts: Mapping[str, TextData], clean: bool = True) -> list[Record]:
    """One record per text member.

    Its lines (stripped, blank ones dropped with ``clean``), line and word counts, and the
    whole text.
    """
    out: list[Record] = []
    for name, t in texts.items():
        lines = [ln.strip() for ln in t.lines if ln.strip()] if clean else list(t.lines)
        out.append(
            {
                "filename": name,
                "lines": lines,
                "line_count": len(lines),
                "word_count": t.word_count,
                "raw_text": t.text,
            }
        )
    return out


def tabular_rows(tables: Mapping[str, CsvTable], values: Mapping[str, Any]) -> list[Record]:
    """CSV rows, then every JSON record that is a dict, flattened (cdmltrain's ``get_tabular``)."""
    rows = csv_rows(tables)
    rows += [r for r in json_records(values, flat=True) if isinstance(r, dict)]
    return rows
