"""``cdml-edge calibrate``: a scikit-learn anomaly model gets its threshold from normal samples.

The model is a skl2onnx IsolationForest, the samples a folder of normal CSV files; the
threshold is written back into the commented config.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import yaml
from helpers.byom_models import sklearn_isolation_forest
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.config import load_config
from cdml_edge.model.runner import ModelOverrides, ModelRunner

CONFIG = """\
    device: {id: edge-1}  # the line
    sources:
      - {name: line, path: in, modality: csv}
    models:
      # IsolationForest from scikit-learn: lower scores are outliers
      forest:
        path: forest.onnx
        modality: csv
        input: {columns: [temp, vib]}
        output: {kind: anomaly, name: scores, anomaly_when: below}
"""


def _setup(tmp_path: Path) -> Path:
    sklearn_isolation_forest(tmp_path / "forest.onnx")
    (tmp_path / "in").mkdir()
    normal = tmp_path / "normal"
    normal.mkdir()
    rng = np.random.default_rng(7)
    for i in range(50):
        t, v = rng.normal(20, 1), rng.normal(0.5, 0.05)
        (normal / f"s{i:02d}.csv").write_text(f"temp,vib\n{t:.3f},{v:.4f}\n")
    path = tmp_path / "factory.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


def test_an_uncalibrated_anomaly_model_is_refused_with_the_way_out(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    r = CliRunner().invoke(app, ["config", "validate", str(path)])
    assert r.exit_code == 2
    assert "models.forest.anomaly_threshold: not set" in r.output
    assert "cdml-edge calibrate --model forest" in r.output


def test_calibrate_writes_the_percentile_back_keeping_comments(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(tmp_path / "normal"),
            "--config",
            str(path),
            "--model",
            "forest",
            "--percentile",
            "98",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "percentile 98 of 50 normal samples" in r.output and "written to" in r.output
    text = path.read_text()
    assert "# IsolationForest from scikit-learn" in text and "# the line" in text
    threshold = yaml.safe_load(text)["models"]["forest"]["anomaly_threshold"]
    # lower is abnormal: the threshold is the 2nd percentile of the normal scores
    cfg = load_config(path)
    mc = cfg.models["forest"]
    runner = ModelRunner.load(mc.path, ModelOverrides.from_config(mc, "forest"))
    rows = [
        np.loadtxt(f, delimiter=",", skiprows=1, ndmin=2).astype(np.float32)
        for f in sorted((tmp_path / "normal").iterdir())
    ]
    preds = runner.run(np.stack([runner.prepare(a) for a in rows]))
    scores = np.array([p.anomaly_score for p in preds])
    assert threshold == float(f"{np.percentile(scores, 2.0):.6g}")  # as printed
    assert sum(p.anomaly for p in preds) == 1  # 2 % of 50, the one lowest sample
    r = CliRunner().invoke(app, ["config", "validate", str(path)])
    assert r.exit_code == 0, r.output


def test_calibrate_refuses_a_model_that_is_not_an_anomaly_scorer(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    path.write_text(
        path.read_text().replace(
            "output: {kind: anomaly, name: scores, anomaly_when: below}",
            "labels: [a]\n    output: {kind: classifier, name: scores}",
        )
    )
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(tmp_path / "normal"),
            "--config",
            str(path),
            "--model",
            "forest",
            "--dry-run",
        ],
    )
    assert r.exit_code == 2
    assert "not an anomaly scorer" in r.output


FLOW = """\
device: {id: edge-1}  # the line
sources: [{name: line, path: in, modality: csv}]
models:
  # IsolationForest from scikit-learn: lower scores are outliers
  forest: {path: forest.onnx, modality: csv, input: {columns: [temp, vib]},
           output: {kind: anomaly, name: scores, anomaly_when: below}}  # flow style
"""


def _calibrate(path: Path, tmp_path: Path) -> tuple[str, float]:
    argv = ["calibrate", str(tmp_path / "normal"), "--config", str(path), "--model", "forest"]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    assert "rewritten" not in r.output, r.output
    printed = r.stdout.split("anomaly_threshold = ", 1)[1].split(":", 1)[0]
    return printed, yaml.safe_load(path.read_text())["models"]["forest"]["anomaly_threshold"]


def test_calibrate_keeps_a_flow_style_config_and_writes_what_it_prints(tmp_path: Path) -> None:
    """It rewrote the whole file ("comments could not be kept") and wrote 17 digits."""
    path = _setup(tmp_path)
    path.write_text(FLOW)
    printed, written = _calibrate(path, tmp_path)
    assert written == float(printed) and f"anomaly_threshold: {printed}" in path.read_text()
    assert path.read_text() == FLOW.replace(
        "anomaly_when: below}}", f"anomaly_when: below}}, anomaly_threshold: {printed}}}"
    )
    path.write_text(path.read_text().replace(printed, "123.0"))  # again: the value is replaced
    printed2, _ = _calibrate(path, tmp_path)
    assert path.read_text() == FLOW.replace(
        "anomaly_when: below}}", f"anomaly_when: below}}, anomaly_threshold: {printed2}}}"
    )
    assert CliRunner().invoke(app, ["config", "validate", str(path)]).exit_code == 0


def test_calibrate_in_the_readme_layout(tmp_path: Path) -> None:
    """One model per line in flow style under a block ``models:``; an empty ``{}`` too."""
    path = _setup(tmp_path)
    body = textwrap.dedent(CONFIG).split("models:")[0]
    one_line = (
        "models:\n  forest: {path: forest.onnx, modality: csv, input: {columns: [temp, vib]}, "
        "output: {kind: anomaly, name: scores, anomaly_when: below}}  # one line\n"
    )
    path.write_text(body + one_line)
    printed, written = _calibrate(path, tmp_path)
    assert path.read_text() == body + one_line.replace(
        "below}}", f"below}}, anomaly_threshold: {printed}}}"
    )
    assert written == float(printed)
