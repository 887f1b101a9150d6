"""``replay --model`` replaces the configured model of its modality, whatever its name."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.model.spec import META_KEY


def _new_model(old: Path, path: Path) -> Path:
    """The same graph under version 2.0.0 with its labels the other way round."""
    import onnx

    m = onnx.load(str(old))
    for prop in m.metadata_props:
        if prop.key == META_KEY:
            spec = json.loads(prop.value)
            spec["labels"] = list(reversed(spec["labels"]))
            spec["version"] = "2.0.0"
            prop.value = json.dumps(spec)
    onnx.save(m, str(path))
    return path


def _setup(tmp_path: Path, models: dict[str, dict[str, str]]) -> tuple[Path, Path]:
    model = brightness_classifier(tmp_path / "brightness.onnx")
    scored_ring(tmp_path / "ring", model, [[10, 200, 30], [250, 5]])
    (tmp_path / "inc").mkdir()
    cfg = {
        "device": {"id": "edge-1"},
        "sources": [{"name": "cam1", "kind": "folder", "path": "inc", "modality": "image"}],
        "models": models,
        "retention": {"dir": "ring", "max_bytes": "64MiB"},
    }
    (tmp_path / "factory.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "factory.yaml", _new_model(model, tmp_path / "v2.onnx")


def test_replay_model_replaces_a_named_model_of_its_modality(tmp_path: Path) -> None:
    """``models.defects`` (modality image) is replaced by ``--model v2.onnx`` (image).

    The new file used to be loaded beside it and never run: the source kept its configured
    model, the results file said version 1.0.0 and the run exited 0.
    """
    config, new = _setup(tmp_path, {"defects": {"path": "brightness.onnx", "modality": "image"}})
    out = tmp_path / "v2.jsonl"
    r = CliRunner().invoke(
        app, ["replay", "--config", str(config), "--model", str(new), "--out", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {rec["model_version"] for rec in recs} == {"2.0.0"}
    assert all(rec["label"] != rec["was"]["label"] for rec in recs)  # its labels are reversed
    assert "5 labels" in r.output and "matched no item" not in r.output


def test_replay_model_is_refused_when_the_model_it_replaces_is_ambiguous(
    tmp_path: Path,
) -> None:
    models = {
        "defects": {"path": "brightness.onnx", "modality": "image"},
        "shade": {"path": "brightness.onnx", "modality": "image"},
    }
    config, new = _setup(tmp_path, models)
    r = CliRunner().invoke(
        app, ["replay", "--config", str(config), "--model", str(new), "--out", "x.jsonl", "-q"]
    )
    assert r.exit_code == 2, r.output
    assert "2 image models (defects, shade)" in r.output


def test_replay_model_still_replaces_the_model_named_by_its_modality(tmp_path: Path) -> None:
    config, new = _setup(tmp_path, {"image": {"path": "brightness.onnx"}})
    out = tmp_path / "v2.jsonl"
    r = CliRunner().invoke(
        app, ["replay", "--config", str(config), "--model", str(new), "--out", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {rec["model_version"] for rec in recs} == {"2.0.0"}
