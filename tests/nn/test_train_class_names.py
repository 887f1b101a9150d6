"""``cdml-edge train`` on class folders with awkward names.

A folder name that is not UTF-8 (an archive from a machine writing Latin-1 names) cannot
be a label: labels live in the ONNX metadata, which is UTF-8 text. It is refused before any
epoch runs, naming the folder. A very long name trains, and its plots are drawn without a
warning about the figure.
"""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

pytest.importorskip("torch")

from cdml_edge.cli import app  # noqa: E402
from cdml_edge.nn.recipes import train_from_archive  # noqa: E402


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _latin1_archive(path: Path) -> Path:
    r"""Classes ``ok`` and ``caf\xe9x`` (the Latin-1 byte 0xE9), the UTF-8 flag set on it.

    The name is written as UTF-8 ``caf\u00ff`` first, then its two bytes of ``\u00ff``
    become ``\xe9x``: the same length, so the archive's offsets still hold.
    """
    with zipfile.ZipFile(path, "w") as z:
        for i in range(5):
            z.writestr(f"ok/{i}.png", _png(20 + i))
            z.writestr(f"caf\u00ff/{i}.png", _png(230 - i))  # noqa: RUF001
    data = path.read_bytes().replace("caf\u00ff".encode(), b"caf\xe9x")
    path.write_bytes(data)
    return path


def test_a_class_folder_that_is_not_utf8_is_refused_before_training(tmp_path: Path) -> None:
    data = _latin1_archive(tmp_path / "latin1.zip")
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app,
        ["train", "--data", str(data), "--modality", "image", "--epochs", "1"]
        + ["--image-size", "16", "--out", str(out)],
    )
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith("cdml-edge train: ")
    assert "caf%E9x" in lines[0] and "UTF-8" in lines[0]
    assert "epoch 1/1" not in r.output  # refused before training, not after an epoch
    assert not out.exists()


def test_a_very_long_class_name_trains_and_plots_without_warnings(tmp_path: Path) -> None:
    long = "scratch-on-the-left-side-of-the-housing-" * 6  # 240 characters
    data = tmp_path / "long.zip"
    with zipfile.ZipFile(data, "w") as z:
        for i in range(6):
            z.writestr(f"ok/{i}.png", _png(20 + i))
            z.writestr(f"{long}/{i}.png", _png(230 - i))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = train_from_archive(data, "image", 1, tmp_path / "run", image_size=16)
    assert result.spec.labels == ["ok", long]
    assert [p.name for p in result.plots] == ["training.png", "confusion.png"]
    assert [str(w.message) for w in seen if "layout" in str(w.message)] == []
    confusion = json.loads((tmp_path / "run" / "confusion.json").read_text())
    assert confusion["labels"] == ["ok", long]  # the names in full
