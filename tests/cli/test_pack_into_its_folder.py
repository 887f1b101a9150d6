"""``cdml-edge pack DIR DIR/out.zip`` run again leaves the last ``out.zip`` out of the new one."""

from __future__ import annotations

import zipfile
from pathlib import Path

from typer.testing import CliRunner

from cdml_edge.cli import app


def test_the_output_inside_the_folder_is_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    out = folder / "self.zip"
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(app, ["pack", str(folder), str(out)])
        assert result.exit_code == 0, result.output
    with zipfile.ZipFile(out) as zf:
        assert zf.namelist() == ["a.txt"]
    assert "self.zip" in result.output and "the output archive" in result.output
