"""``cdml-edge calibrate`` with a model that scores NaN or inf: nothing is written.

A threshold of ``nan`` compares false with every score, so an appliance given one never
flags an anomaly; ``inf`` flags none either. The command refuses, naming the samples.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.byom_models import image_png
from typer.testing import CliRunner

from cdml_edge.cli import app

CONFIG = """\
    device: {id: edge-1}  # the line
    sources:
      - {name: cam, path: in, modality: image}
    models:
      # scores each image by its mean times a constant
      scorer:
        path: scorer.onnx
        modality: image
        input: {size: 16}
        output: {kind: anomaly, name: score}
"""


def _scorer(path: Path, factor: float, nan_above: float | None = None) -> None:
    """``score`` (N,): the mean of the pixels times ``factor``.

    With ``nan_above``: NaN where the mean is over it, ``factor`` times the mean below it.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Mul", ["m", "k"], ["score0"]),
    ]
    inits = [numpy_helper.from_array(np.array(factor, dtype=np.float32), "k")]
    if nan_above is None:
        nodes.append(helper.make_node("Identity", ["score0"], ["score"]))
    else:
        inits += [
            numpy_helper.from_array(np.array(nan_above, dtype=np.float32), "limit"),
            numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "nan"),
        ]
        nodes += [
            helper.make_node("Greater", ["m", "limit"], ["over"]),
            helper.make_node("Where", ["over", "nan", "score0"], ["score"]),
        ]
    graph = helper.make_graph(
        nodes,
        "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())


def _setup(tmp_path: Path, factor: float, nan_above: float | None = None) -> Path:
    _scorer(tmp_path / "scorer.onnx", factor, nan_above)
    (tmp_path / "in").mkdir()
    normal = tmp_path / "normal"
    normal.mkdir()
    for i, level in enumerate((10, 40, 80, 200)):
        image_png(normal / f"n{i}.png", (level, level, level), 16, 16)
    path = tmp_path / "factory.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


@pytest.mark.parametrize("factor", [float("nan"), float("inf")])
def test_a_model_scoring_every_sample_non_finite_writes_nothing(
    tmp_path: Path, factor: float
) -> None:
    path = _setup(tmp_path, factor)
    before = path.read_bytes()
    r = CliRunner().invoke(
        app, ["calibrate", str(tmp_path / "normal"), "--config", str(path), "--model", "scorer"]
    )
    assert r.exit_code == 2, r.output
    assert path.read_bytes() == before
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith("cdml-edge calibrate: ")
    assert "not finite" in lines[0] and "4 of 4" in lines[0]
    assert "n0.png" in lines[0]
    assert "Traceback" not in r.output


def test_one_non_finite_sample_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    path = _setup(tmp_path, 1.0, nan_above=0.5)  # only n3.png (level 200) scores NaN
    before = path.read_bytes()
    r = CliRunner().invoke(
        app,
        ["calibrate", str(tmp_path / "normal"), "-c", str(path), "-m", "scorer", "--dry-run"],
    )
    assert r.exit_code == 2, r.output
    assert path.read_bytes() == before
    assert "1 of 4" in r.output and "n3.png" in r.output
    assert "anomaly_threshold = nan" not in r.output


def test_finite_scores_still_calibrate(tmp_path: Path) -> None:
    path = _setup(tmp_path, 1.0)
    r = CliRunner().invoke(
        app, ["calibrate", str(tmp_path / "normal"), "-c", str(path), "-m", "scorer"]
    )
    assert r.exit_code == 0, r.output
    assert "anomaly_threshold:" in path.read_text()


def test_a_file_given_as_the_folder_is_called_a_file(tmp_path: Path) -> None:
    path = _setup(tmp_path, 1.0)
    sample = tmp_path / "normal" / "n0.png"
    r = CliRunner().invoke(app, ["calibrate", str(sample), "-c", str(path), "-m", "scorer"])
    assert r.exit_code == 2, r.output
    assert "not found" not in r.output
    assert f"{sample}: not a folder" in r.output
