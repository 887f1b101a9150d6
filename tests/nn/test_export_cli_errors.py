"""``cdml-edge export-onnx`` refusing what it cannot do: one line naming it, no traceback.

An output that is a folder is named as the user gave it (not a temporary name), and an
opset the exporter cannot write a valid graph at is an error, not onnx's traceback. Nothing
is left behind in either case.
"""

from __future__ import annotations

import io
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


@pytest.fixture(name="ckpt", scope="module")
def ckpt_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    data = root / "shades.zip"
    with zipfile.ZipFile(data, "w") as z:
        for i in range(4):
            z.writestr(f"dark/{i}.png", _png(10 + i))
            z.writestr(f"light/{i}.png", _png(240 - i))
    return train_from_archive(data, "image", 0, root / "run", image_size=16).checkpoint


def _one_line(output: str) -> str:
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("cdml-edge export-onnx: ")
    return lines[0]


def test_an_output_that_is_a_folder_is_named(ckpt: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    r = CliRunner().invoke(app, ["export-onnx", str(ckpt), str(folder)])
    assert r.exit_code == 2, r.output
    line = _one_line(r.output)
    assert f"{folder}: " in line and "folder" in line
    assert ".tmp" not in line
    assert sorted(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == []


def test_an_opset_the_exporter_cannot_write_is_one_line(ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "old.onnx"
    r = CliRunner().invoke(app, ["export-onnx", str(ckpt), str(out), "--opset", "5"])
    assert r.exit_code == 2, r.output
    line = _one_line(r.output)
    assert str(out) in line and "opset 5" in line
    assert list(tmp_path.iterdir()) == []


def test_the_default_opset_still_exports(ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    r = CliRunner().invoke(app, ["export-onnx", str(ckpt), str(out)])
    assert r.exit_code == 0, r.output
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
