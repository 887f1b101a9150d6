"""``cdml-edge train`` with an option it cannot use: one line naming it, exit 2, no training.

Each is refused before the first epoch (not after a run of training) and never as a
traceback.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from cdml_edge.cli import app  # noqa: E402


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(name="shades")
def shades_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "shades.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(5):
            z.writestr(f"dark/{i}.png", _png(10 + i))
            z.writestr(f"light/{i}.png", _png(240 - i))
    return path


def _train(data: Path, out: Path, *extra: str) -> tuple[int, str]:
    args = ["train", "--data", str(data), "--modality", "image", "--epochs", "1"]
    r = CliRunner().invoke(app, [*args, "--image-size", "16", "--out", str(out), *extra])
    return r.exit_code, r.output


def _refused(code: int, output: str, *words: str) -> str:
    assert code == 2, output
    assert "Traceback" not in output
    assert "epoch 1/1" not in output  # before any training
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--channels", "2", ("--channels", "1 (grey) or 3 (RGB)")),
        ("--image-size", "0", ("--image-size",)),
        ("--seed", "-1", ("--seed",)),
        ("--device", "gpu0", ("--device", "gpu0")),
    ],
)
def test_a_bad_option_value_is_named(
    shades: Path, tmp_path: Path, option: str, value: str, words: tuple[str, ...]
) -> None:
    out = tmp_path / "run"
    code, output = _train(shades, out, option, value)
    line = _refused(code, output, *words)
    assert "pydantic" not in line and "[type=" not in line
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_cuda_without_a_gpu_is_refused_with_the_way_out(shades: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = _train(shades, out, "--device", "cuda")
    _refused(code, output, "--device cuda", "--device cpu")
    assert not out.exists()


def test_an_unknown_normal_class_is_refused_before_training(shades: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = _train(shades, out, "--anomaly-normal", "normal")
    _refused(code, output, "--anomaly-normal", "'normal'", "dark, light")
    assert not out.exists()


def test_the_normal_class_still_trains_an_anomaly_model(shades: Path, tmp_path: Path) -> None:
    code, output = _train(shades, tmp_path / "run", "--anomaly-normal", "dark")
    assert code == 0, output
    assert (tmp_path / "run" / "checkpoints" / "epoch-0001-anomaly.pt").is_file()
