"""``cdml-edge train --out`` naming a file: a usage error (exit 2), before any training.

It used to train, then end in ``File exists`` with exit 1 (a failed run), where every other
command refuses a bad output path with exit 2 before any work.
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


def _shades(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for i in range(4):
            for label, value in (("dark", 10 + i), ("light", 240 - i)):
                buf = io.BytesIO()
                Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(buf, "PNG")
                z.writestr(f"{label}/{i}.png", buf.getvalue())
    return path


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_train_out_that_is_a_file_is_a_usage_error(tmp_path: Path, where: str) -> None:
    data = _shades(tmp_path / "shades.zip")
    existing = tmp_path / "run"
    existing.write_text("my notes\n")
    out = existing if where == "file" else existing / "sub"
    args = ["train", "--data", str(data), "--epochs", "1", "--image-size", "16"]
    r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert lines[0].startswith("cdml-edge train: --out ") and "not a folder" in lines[0], lines[0]
    assert "epoch 1/1" not in r.output  # refused before any training
    assert existing.read_text() == "my notes\n"
