"""``set_model_key`` (what ``cdml-edge calibrate`` writes with) on aliases and linked files.

An alias (``line_b: *base``) is the anchored node itself: writing into it changed every
model that shares it. A configuration that is a link stays a link: its target is edited.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from cdml_edge.config.bounded import parse_yaml
from cdml_edge.config.edit import set_model_key

ALIASED = """\
# two lines, one model
models:
  line_a: &base
    path: a.onnx
    modality: timeseries
  line_b: *base  # the same model on line B
"""


def _models(path: Path) -> dict[str, dict[str, object]]:
    models: dict[str, dict[str, object]] = parse_yaml(path.read_text())["models"]
    return models


def test_an_alias_gets_its_own_value_and_the_anchor_keeps_its_own(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text(ALIASED)
    kept = set_model_key(path, "line_b", "anomaly_threshold", 0.75)
    models = _models(path)
    assert models["line_b"] == {
        "path": "a.onnx",
        "modality": "timeseries",
        "anomaly_threshold": 0.75,
    }
    assert models["line_a"] == {"path": "a.onnx", "modality": "timeseries"}
    assert kept, path.read_text()
    text = path.read_text()
    assert "# the same model on line B" in text and "<<: *base" in text


def test_an_alias_in_a_flow_mapping_gets_a_merge_too(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text("models: {line_a: &base {path: a.onnx}, line_b: *base}\n")
    assert set_model_key(path, "line_b", "anomaly_threshold", 0.5)
    assert _models(path) == {
        "line_a": {"path": "a.onnx"},
        "line_b": {"path": "a.onnx", "anomaly_threshold": 0.5},
    }


def test_an_alias_on_a_line_of_its_own_gets_a_merge_too(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text("models:\n  line_a: &base\n    path: a.onnx\n  line_b:\n    *base\n")
    assert set_model_key(path, "line_b", "anomaly_threshold", 0.5)
    assert _models(path) == {
        "line_a": {"path": "a.onnx"},
        "line_b": {"path": "a.onnx", "anomaly_threshold": 0.5},
    }


def test_an_alias_that_already_has_the_key_from_its_anchor_overrides_it(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text(
        ALIASED.replace("    path: a.onnx\n", "    path: a.onnx\n    anomaly_threshold: 0.1\n")
    )
    assert set_model_key(path, "line_b", "anomaly_threshold", 0.9)
    models = _models(path)
    assert models["line_a"]["anomaly_threshold"] == 0.1
    assert models["line_b"]["anomaly_threshold"] == 0.9


def test_the_anchor_written_leaves_its_aliases_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text(ALIASED)
    set_model_key(path, "line_a", "anomaly_threshold", 0.25)
    models = _models(path)
    assert models["line_a"]["anomaly_threshold"] == 0.25
    assert models["line_b"] == {"path": "a.onnx", "modality": "timeseries"}


def test_a_value_that_is_an_alias_is_replaced_here_not_at_its_anchor(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text(
        "models:\n"
        "  line_a: {path: a.onnx, anomaly_threshold: &t 0.5}\n"
        "  line_b: {path: b.onnx, anomaly_threshold: *t}\n"
    )
    set_model_key(path, "line_b", "anomaly_threshold", 0.8)
    models = _models(path)
    assert models["line_a"]["anomaly_threshold"] == 0.5
    assert models["line_b"]["anomaly_threshold"] == 0.8


def test_a_linked_config_stays_a_link_and_its_target_is_edited(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("# kept\nmodels:\n  line_a: {path: a.onnx}\n")
    real.chmod(0o640)
    link = tmp_path / "conf" / "link.yaml"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(real, link.parent))
    assert set_model_key(link, "line_a", "anomaly_threshold", 0.5)
    assert link.is_symlink() and link.resolve() == real
    assert yaml.safe_load(real.read_text())["models"]["line_a"]["anomaly_threshold"] == 0.5
    assert "# kept" in real.read_text()
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "real.yaml"]  # no temp left
    assert [p.name for p in link.parent.iterdir()] == ["link.yaml"]


def test_a_chain_of_links_edits_the_last_target(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("models:\n  m: {path: a.onnx}\n")
    (tmp_path / "mid.yaml").symlink_to("real.yaml")
    (tmp_path / "top.yaml").symlink_to("mid.yaml")
    set_model_key(tmp_path / "top.yaml", "m", "anomaly_threshold", 1.5)
    assert (tmp_path / "top.yaml").is_symlink() and (tmp_path / "mid.yaml").is_symlink()
    assert yaml.safe_load(real.read_text())["models"]["m"]["anomaly_threshold"] == 1.5


def test_calibrate_through_a_link_writes_the_alias_only(tmp_path: Path) -> None:
    """The command as a user runs it: ``calibrate --model line_b`` on a linked configuration."""
    import numpy as np
    from helpers.byom_models import sklearn_isolation_forest
    from typer.testing import CliRunner

    from cdml_edge.cli import app

    sklearn_isolation_forest(tmp_path / "forest.onnx")
    normal = tmp_path / "normal"
    normal.mkdir()
    rng = np.random.default_rng(7)
    for i in range(20):
        (normal / f"s{i:02d}.csv").write_text(
            f"temp,vib\n{rng.normal(20, 1):.3f},{rng.normal(0.5, 0.05):.4f}\n"
        )
    real = tmp_path / "real.yaml"
    real.write_text(
        "models:\n"
        "  line_a: &base  # line A's forest\n"
        "    path: forest.onnx\n"
        "    modality: csv\n"
        "    input: {columns: [temp, vib]}\n"
        "    output: {kind: anomaly, name: scores, anomaly_when: below}\n"
        "    anomaly_threshold: 0.0\n"
        "  line_b: *base\n"
    )
    link = tmp_path / "factory.yaml"
    link.symlink_to("real.yaml")
    r = CliRunner().invoke(
        app, ["calibrate", str(normal), "--config", str(link), "--model", "line_b"]
    )
    assert r.exit_code == 0, r.output
    assert link.is_symlink()
    models = _models(real)
    assert models["line_a"]["anomaly_threshold"] == 0.0
    assert models["line_b"]["anomaly_threshold"] != 0.0
    assert "# line A's forest" in real.read_text()
