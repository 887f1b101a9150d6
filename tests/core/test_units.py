"""Counts in messages: ``1 file``, ``2 files`` (it printed "1 files")."""

from __future__ import annotations

from pathlib import Path

from helpers.models import brightness_classifier
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.units import counted


def test_counted_nouns() -> None:
    assert [counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert counted(1, "class") == "1 class" and counted(3, "class") == "3 classes"
    assert counted(2, "anomaly", "anomalies") == "2 anomalies"


def test_one_file_through_cdml_edge_test_is_one_file(tmp_path: Path) -> None:
    from helpers.agent_runs import jpeg

    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jpg").write_bytes(jpeg(200))
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(
        "sources: [{name: cam, path: in, modality: image}]\nmodels: {image: {path: b.onnx}}\n"
    )
    r = CliRunner().invoke(app, ["test", "--config", str(cfg), str(tmp_path / "in" / "a.jpg")])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[-1] == "1 file, 0 failed"
