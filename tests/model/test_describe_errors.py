"""A description that does not fit its model is one line per problem, in the user's words.

A layout that contradicts the graph, a ``mean`` of the wrong length, a graph that does not
fix the MFCC size: each is named by its configuration key, without pydantic's own report
(its error count, ``[type=...]`` and its web address) and with the file named once.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from cdml_edge.cli import app


def _mean_classifier(path: Path, shape: list[int | str], dtype: int) -> Path:
    """``scores`` (N, 3): the mean of each channel of a 4-D image input of ``shape``."""
    import onnx
    from onnx import TensorProto, helper

    channels_last = shape[-1] == 3
    axes = [1, 2] if channels_last else [2, 3]
    nodes = [
        helper.make_node("Cast", ["pixels"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["scores"], axes=axes, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "means",
        [helper.make_tensor_value_info("pixels", dtype, shape)],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def _validate(tmp_path: Path, model_yaml: str) -> list[str]:
    from onnx import TensorProto

    _mean_classifier(tmp_path / "nhwc.onnx", ["N", 32, 32, 3], TensorProto.UINT8)
    _mean_classifier(tmp_path / "nchw.onnx", ["N", 3, 32, 32], TensorProto.FLOAT)
    (tmp_path / "in").mkdir()
    config = tmp_path / "factory.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            device: {id: edge-1}
            sources:
              - {name: cam, path: in, modality: image}
            models:
            """
        )
        + textwrap.indent(textwrap.dedent(model_yaml), "  ")
    )
    r = CliRunner().invoke(app, ["config", "validate", str(config)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    for line in lines:
        assert line.startswith("cdml-edge config validate: "), r.output
        assert "pydantic" not in line and "validation error" not in line and "[type=" not in line
    return lines


def test_nchw_given_for_an_nhwc_graph_names_the_layout(tmp_path: Path) -> None:
    lines = _validate(
        tmp_path,
        """\
        colour:
          path: nhwc.onnx
          modality: image
          labels: [red, green, blue]
          input: {layout: NCHW}
          output: {kind: classifier}
        """,
    )
    assert len(lines) == 1, lines
    assert "input.layout" in lines[0] and "?x32x32x3" in lines[0] and "NHWC" in lines[0]


def test_nhwc_given_for_an_nchw_graph_names_the_layout(tmp_path: Path) -> None:
    lines = _validate(
        tmp_path,
        """\
        colour:
          path: nchw.onnx
          modality: image
          labels: [red, green, blue]
          input: {layout: NHWC}
          output: {kind: classifier}
        """,
    )
    assert len(lines) == 1, lines
    assert "input.layout" in lines[0] and "?x3x32x32" in lines[0] and "NCHW" in lines[0]


def test_a_mean_of_the_wrong_length_is_one_line(tmp_path: Path) -> None:
    lines = _validate(
        tmp_path,
        """\
        colour:
          path: nchw.onnx
          modality: image
          labels: [red, green, blue]
          input: {mean: [0.5, 0.5], std: [1, 1, 1]}
          output: {kind: classifier}
        """,
    )
    assert len(lines) == 1, lines
    assert "mean/std need 3 values, got 2/3" in lines[0]


def test_an_audio_graph_without_mfcc_sizes_names_the_file_once(tmp_path: Path) -> None:
    lines = _validate(
        tmp_path,
        """\
        hum:
          path: nchw.onnx
          modality: audio
          output: {kind: anomaly}
          anomaly_threshold: 1.0
        """,
    )
    assert len(lines) == 1, lines
    assert "input.n_mfcc" in lines[0]
    assert lines[0].count("nchw.onnx") == 1, lines[0]


def test_the_layout_read_off_the_graph_still_scores(tmp_path: Path) -> None:
    from cdml_edge.model.describe import Description
    from cdml_edge.model.runner import ModelOverrides, ModelRunner

    _mean_classifier(tmp_path / "m.onnx", ["N", 32, 32, 3], 2)  # uint8 NHWC
    desc = Description(name="colour", modality="image", labels=["red", "green", "blue"])
    runner = ModelRunner.load(tmp_path / "m.onnx", ModelOverrides(description=desc))
    frame = np.zeros((20, 30, 3), dtype=np.uint8)
    frame[..., 1] = 200
    [pred] = runner.run(runner.prepare(frame)[None])
    assert pred.label == "green"
