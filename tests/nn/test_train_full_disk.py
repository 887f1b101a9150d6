"""Training and export onto a full disk: one line naming the file, nothing half-written left.

A checkpoint or model that cannot be written must not leave its partial temporary file
behind (it holds the space the next try needs), and the error must say where it failed.
"""

from __future__ import annotations

import errno
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers.full_disk import FullDisk
from PIL import Image
from typer.testing import CliRunner

pytest.importorskip("torch")

from cdml_edge.cli import app  # noqa: E402
from cdml_edge.nn import checkpoint  # noqa: E402
from cdml_edge.nn import onnx_export as onnx_export_module  # noqa: E402
from cdml_edge.nn import train as train_module  # noqa: E402


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _archive(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for i in range(6):
            z.writestr(f"dark/{i}.png", _png(10 + i))
            z.writestr(f"light/{i}.png", _png(240 - i))
    return path


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name != "filler")


def test_a_checkpoint_that_does_not_fit_leaves_no_partial_file(full_disk: FullDisk) -> None:
    folder = full_disk.path / "checkpoints"
    folder.mkdir()
    full_disk.inject_open(checkpoint)
    full_disk.fill()
    payload = {"format": checkpoint.FORMAT, "blob": np.random.default_rng(0).bytes(400_000)}
    with pytest.raises(OSError) as info:
        checkpoint.write_new(folder, "epoch-0001", payload)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename is not None and str(folder) in str(info.value.filename)
    assert _left(folder) == []
    full_disk.free()
    written = checkpoint.write_new(folder, "epoch-0001", {"format": checkpoint.FORMAT})
    assert _left(folder) == [written.name] == ["epoch-0001.pt"]


def test_train_onto_a_full_disk_names_the_file_and_leaves_no_partial_file(
    full_disk: FullDisk,
    tmp_path: Path,
) -> None:
    data = _archive(tmp_path / "shades.zip")
    out = full_disk.path / "run"
    out.mkdir()
    full_disk.inject_open(checkpoint)
    full_disk.inject_open(train_module)
    full_disk.fill()
    r = CliRunner().invoke(
        app,
        ["train", "--data", str(data), "--modality", "image", "--epochs", "1"]
        + ["--image-size", "16", "--out", str(out)],
    )
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("cdml-edge train:")]
    assert len(errors) == 1, r.output
    assert str(out) in errors[0] and "No space left on device" in errors[0]
    assert not [n for n in _left(out) if n.endswith(".tmp")]


def test_export_onto_a_full_disk_names_the_file_and_leaves_nothing(
    full_disk: FullDisk,
    tmp_path: Path,
) -> None:
    data = _archive(tmp_path / "shades.zip")
    run = tmp_path / "run"
    r = CliRunner().invoke(
        app,
        ["train", "--data", str(data), "--modality", "image", "--epochs", "1"]
        + ["--image-size", "16", "--out", str(run)],
    )
    assert r.exit_code == 0, r.output
    ckpt = run / "checkpoints" / "epoch-0001.pt"
    target = full_disk.path / "shades.onnx"
    full_disk.inject_call(onnx_export_module, "_save_model")
    full_disk.fill()
    r = CliRunner().invoke(app, ["export-onnx", str(ckpt), str(target)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert r.output.startswith("cdml-edge export-onnx: ")
    assert str(target) in r.output and "No space left on device" in r.output
    assert _left(full_disk.path) == []
    if full_disk.kind == "injected":  # the real disk (256 KiB) is smaller than the model
        full_disk.free()
        r = CliRunner().invoke(app, ["export-onnx", str(ckpt), str(target)])
        assert r.exit_code == 0, r.output
        assert _left(full_disk.path) == ["shades.onnx"]
