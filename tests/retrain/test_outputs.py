"""What replay and export write: refused at once when unwritable, named when a write fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.full_disk import fill, small_tmpfs
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner, Result

from cdml_edge.cli import app

VALUES = [[10, 200, 30], [250, 5]]


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    model = brightness_classifier(tmp_path / "brightness.onnx")
    scored_ring(tmp_path / "ring", model, VALUES)
    cfg = {"device": {"id": "edge-1"}, "models": {"image": {"path": model.name}}}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "ring"


def _cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def _replay(ring: Path, out: Path) -> Result:
    return _cli("replay", ring, "--config", ring.parent / "f.yaml", "--out", out, "-q")


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "full", "64k") as mnt:
        fill(mnt)
        yield mnt


def test_export_into_a_folder_is_refused_before_the_work(ring: Path, tmp_path: Path) -> None:
    """It used to read every window, then fail naming a temporary file: ``.tmp-x.part``."""
    (tmp_path / "train.zip").mkdir()
    r = _cli("export", ring, tmp_path / "train.zip", "-q")
    assert r.exit_code == 2, r.output
    assert f"{tmp_path / 'train.zip'}: a folder; OUT is the file to write" in r.output
    (tmp_path / "notes").write_text("a file, not a folder")
    r = _cli("export", ring, tmp_path / "notes" / "train.zip", "-q")
    assert r.exit_code == 2 and f"{tmp_path / 'notes'}: not a folder" in r.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_replay_into_a_folder_is_refused_before_the_work(ring: Path, tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").mkdir()
    r = _replay(ring, tmp_path / "r.jsonl")
    assert r.exit_code == 2, r.output
    assert f"{tmp_path / 'r.jsonl'}: a folder; --out is the file to write" in r.output
    assert "replayed" not in r.output


def test_export_onto_a_full_disk_names_the_archive(ring: Path, full: Path) -> None:
    r = _cli("export", ring, full / "train.zip", "-q")
    assert r.exit_code == 1, r.output
    assert f"{full / 'train.zip'}: cannot write: No space left on device" in r.output
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # nothing half written


def test_replay_onto_a_full_disk_names_the_file(ring: Path, full: Path) -> None:
    """A full disk used to print ``[Errno 28] No space left on device``, naming nothing."""
    r = _replay(ring, full / "r.jsonl")
    assert r.exit_code == 1, r.output
    assert f"{full / 'r.jsonl'}: cannot write: No space left on device" in r.output
    assert sorted(p.name for p in full.iterdir()) == ["filler"]
