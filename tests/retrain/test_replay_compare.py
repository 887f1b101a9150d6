"""The replay's before/after picture: ``cdml-edge replay --out X.jsonl`` writes ``X.png``.

It compares what the retained windows were told with what the replayed model says.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest
import yaml
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.model.spec import META_KEY
from cdml_edge.retrain.compare import MAX_POINTS, Comparison

VALUES = [[10, 200, 30], [250, 5], [128, 140, 90, 220], [60]]


def _reversed_labels(old: Path, path: Path) -> Path:
    import onnx

    m = onnx.load(str(old))
    for prop in m.metadata_props:
        if prop.key == META_KEY:
            spec = json.loads(prop.value)
            spec["labels"], spec["version"] = list(reversed(spec["labels"])), "2.0.0"
            prop.value = json.dumps(spec)
    onnx.save(m, str(path))
    return path


def _scored_site(tmp_path: Path) -> Path:
    """A ring of scored windows and ``f.yaml`` naming it and its model; the model's path."""
    model = brightness_classifier(tmp_path / "brightness.onnx")
    scored_ring(tmp_path / "ring", model, VALUES)
    cfg = {
        "models": {"image": {"path": "brightness.onnx"}},
        "retention": {"dir": "ring", "max_bytes": "64MiB"},
    }
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(cfg))
    return model


def test_replay_with_a_new_model_draws_before_and_after(tmp_path: Path) -> None:
    model = _scored_site(tmp_path)
    new = _reversed_labels(model, tmp_path / "v2.onnx")
    out = tmp_path / "new.jsonl"
    r = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(tmp_path / "f.yaml"),
            "--model",
            str(new),
            "--out",
            str(out),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    picture = tmp_path / "new.png"
    assert f"before/after: {picture}" in r.output
    img = cv2.imread(str(picture))
    assert img is not None and float(img.std()) > 5
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    comparison = Comparison()
    for doc in recs:
        comparison.add(doc)
    flips = {(d["was"]["label"], d["label"]) for d in recs}
    assert set(comparison.labels) == flips == {("dark", "bright"), ("bright", "dark")}
    assert sum(comparison.labels.values()) == 10
    assert comparison.models == ("brightness 1.0.0", "brightness 2.0.0")


def _doc(before: float, after: float, was_flag: bool, flag: bool) -> dict:
    return {
        "label": None,
        "anomaly": flag,
        "anomaly_score": after,
        "model": "ae",
        "model_version": "2",
        "was": {
            "label": None,
            "anomaly": was_flag,
            "anomaly_score": before,
            "model": "ae",
            "model_version": "1",
            "error": None,
        },
    }


def test_anomaly_scores_are_compared_and_bounded(tmp_path: Path) -> None:
    c = Comparison()
    c.add(_doc(0.1, 0.2, False, False))
    c.add(_doc(0.4, 0.9, False, True))
    c.add({"id": "x", "error": "DecodeError", "was": None})  # a failure: left out
    c.add(
        {**_doc(0.0, 0.5, False, False), "was": {**_doc(0, 0, False, False)["was"], "model": None}}
    )  # a first verdict
    assert c.points == [(0.1, 0.2, False), (0.4, 0.9, True)] and not c.labels
    path = c.write(tmp_path / "scores.png")
    assert path is not None and cv2.imread(str(path)) is not None
    for _ in range(MAX_POINTS + 10):
        c.add(_doc(0.1, 0.1, False, False))
    assert len(c.points) == MAX_POINTS


def test_nothing_to_compare_draws_nothing(tmp_path: Path) -> None:
    assert Comparison().write(tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_without_matplotlib_the_missing_picture_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The appliance's venv (``make demo``) has no matplotlib: the picture is not drawn, said why.

    Before, ``before/after: X.png`` was simply missing from the output.
    """
    from cdml_edge import charts

    monkeypatch.setattr(charts, "available", lambda: False)  # as where it is not installed
    _scored_site(tmp_path)
    out = tmp_path / "new.jsonl"
    args = ["replay", "--config", str(tmp_path / "f.yaml"), "--out", str(out), "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "before/after: not drawn, matplotlib is not installed" in r.output
    assert not (tmp_path / "new.png").exists()
