"""A model whose own ``cdml.spec`` metadata disagrees with its graph is refused at load.

The metadata can be wrong: edited by hand, copied from another export, or a labels list
that lost entries. ``config validate`` (and so ``run``, ``test``, ``doctor``) must say so,
naming what disagrees, instead of the model failing on every window (a wrong input size or
name) or silently publishing class numbers as labels (fewer labels than logits). Metadata
that is not valid JSON is one line, not pydantic's report.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.models import brightness_classifier
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.model.runner import ModelRunner, ModelUnusable


def _edited(path: Path, **changes: object) -> Path:
    """The brightness classifier with its ``cdml.spec`` changed.

    Its graph: input ``input`` N x 3 x 16 x 16, output ``logits`` N x 2.
    """
    import json

    import onnx

    brightness_classifier(path)
    model = onnx.load(str(path))
    graph_input = model.graph.input[0].type.tensor_type.shape.dim
    graph_input[2].dim_value, graph_input[3].dim_value = 16, 16  # a fixed size, as we export
    for entry in model.metadata_props:
        if entry.key == "cdml.spec":
            spec = json.loads(entry.value)
            for key, value in changes.items():
                if key == "size":
                    spec["input"]["size"] = value
                else:
                    spec[key] = value
            entry.value = str(changes.get("raw", json.dumps(spec)))
    path.write_bytes(model.SerializeToString())
    return path


def _validate(tmp_path: Path, model: Path) -> list[str]:
    (tmp_path / "in").mkdir()
    config = tmp_path / "factory.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            device: {{id: edge-1}}
            sources:
              - {{name: cam, path: in, modality: image}}
            models:
              image: {{path: {model.name}}}
            """
        )
    )
    r = CliRunner().invoke(app, ["config", "validate", str(config)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith("cdml-edge config validate: ")
    return lines


def test_fewer_labels_than_logits_is_refused(tmp_path: Path) -> None:
    model = _edited(tmp_path / "m.onnx", labels=["dark"])
    [line] = _validate(tmp_path, model)
    assert "labels: 1 labels for the 2 classes of output 'logits'" in line
    with pytest.raises(ModelUnusable):
        ModelRunner.load(model)


def test_an_input_size_the_graph_does_not_take_is_refused(tmp_path: Path) -> None:
    model = _edited(tmp_path / "m.onnx", size=64)
    [line] = _validate(tmp_path, model)
    assert "the graph's 'input' is ?x3x16x16" in line and "3x64x64" in line


def test_an_input_name_the_graph_lacks_is_refused(tmp_path: Path) -> None:
    model = _edited(tmp_path / "m.onnx", input_name="pixels")
    [line] = _validate(tmp_path, model)
    assert "input.name: 'pixels' is not an input of the graph (input)" in line


def test_metadata_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    model = _edited(tmp_path / "m.onnx", raw="{")
    [line] = _validate(tmp_path, model)
    assert "invalid 'cdml.spec'" in line and "m.onnx" in line
    assert "pydantic" not in line and "[type=" not in line


def test_metadata_that_fits_still_loads_and_scores(tmp_path: Path) -> None:
    runner = ModelRunner.load(_edited(tmp_path / "m.onnx"))
    frame = np.full((20, 30, 3), 250, dtype=np.uint8)
    [pred] = runner.run(runner.prepare(frame)[None])
    assert pred.label == "bright"
