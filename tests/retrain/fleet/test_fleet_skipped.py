"""Windows the fleet engine refuses (links, special files) are counted, named, and fail the run.

As the local engine does: a window archive that is a symbolic link (to a good archive
elsewhere) or a FIFO is never read; ``replay`` and ``export`` name the window on stderr and
exit 1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.retrain.fleet import list_windows
from cdml_edge.retrain.fleet.rows import Scope, WindowRows

pytestmark = pytest.mark.slow

VALUES = [[10, 200], [250, 5, 60], [128, 140]]


@pytest.fixture(scope="module")
def linked_ring(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A ring whose second window archive is a link to a copy outside the ring."""
    base = tmp_path_factory.mktemp("skipped")
    model = brightness_classifier(base / "brightness.onnx")
    ring = base / "device=edge-1" / "ring"
    scored_ring(ring, model, VALUES)
    (ring / "catalog.sqlite").unlink()
    victim = sorted(ring.glob("*.zip"))[1]
    outside = base / "elsewhere.zip"
    shutil.move(victim, outside)
    victim.symlink_to(outside)
    cfg = base / "factory.yaml"
    cfg.write_text(f"models:\n  image:\n    path: {model}\n")
    return ring, victim, cfg


def _run(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.output


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_linked_archive_is_skipped_named_and_fails_the_replay(
    tmp_path: Path, linked_ring: tuple[Path, Path, Path], engine: str
) -> None:
    ring, _, cfg = linked_ring
    out = tmp_path / ("r.parquet" if engine == "ray" else "r.jsonl")
    code, output = _run(
        ["replay", str(ring), "-c", str(cfg), "--engine", engine, "--out", str(out), "-q"]
    )
    assert code == 1, output
    assert "replayed 2 windows, 4 results" in output and "1 refused" in output
    named = [line for line in output.splitlines() if line.endswith("; window skipped")]
    assert len(named) == 1 and "cam1-w001" in named[0] and "symbolic link" in named[0], output


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_linked_archive_is_skipped_named_and_fails_the_export(
    tmp_path: Path, linked_ring: tuple[Path, Path, Path], engine: str
) -> None:
    ring, _, _ = linked_ring
    code, output = _run(["export", str(ring), str(tmp_path / "t.zip"), "--engine", engine, "-q"])
    assert code == 1, output
    assert "exported 4 items" in output and '"refused_windows": 1' in output
    named = [line for line in output.splitlines() if line.endswith("; window skipped")]
    assert len(named) == 1 and "cam1-w001" in named[0] and "symbolic link" in named[0], output


@pytest.mark.timeout(60)
def test_a_fifo_archive_is_a_refused_row_never_opened(tmp_path: Path) -> None:
    """A FIFO in place of an archive would block a reader for ever: refused unread."""
    model = brightness_classifier(tmp_path / "brightness.onnx")
    ring = tmp_path / "ring"
    scored_ring(ring, model, VALUES[:1])
    victim = next(ring.glob("*.zip"))
    victim.unlink()
    os.mkfifo(victim)
    (ref,) = list_windows(str(ring)).windows
    (row,) = WindowRows(Scope()).rows(ref)
    assert row["status"] == "refused" and row["archive"] is None
    assert victim.name in row["error"] and "FIFO" in row["error"]


def _ring_with_bad_sidecar(base: Path, kind: str) -> tuple[Path, Path]:
    """A ring whose second sidecar is a link to a good copy outside the ring, or a FIFO."""
    model = brightness_classifier(base / "brightness.onnx")
    ring = base / "device=edge-1" / "ring"
    scored_ring(ring, model, VALUES)
    (ring / "catalog.sqlite").unlink()
    victim = sorted(ring.glob("*.window.json"))[1]
    if kind == "link":
        outside = base / "elsewhere.window.json"
        shutil.move(victim, outside)
        victim.symlink_to(outside)
    else:
        victim.unlink()
        os.mkfifo(victim)
    return ring, victim


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_linked_or_fifo_sidecar_is_listed_then_refused_unread(tmp_path: Path, kind: str) -> None:
    """The listing dropped such a sidecar silently: the fleet engine exited 0 without naming it."""
    ring, victim = _ring_with_bad_sidecar(tmp_path, kind)
    refs = list_windows(str(ring)).windows
    assert len(refs) == 3
    rows = [r for ref in refs for r in WindowRows(Scope()).rows(ref)]
    assert [r["status"] for r in rows] == ["ok", "refused", "ok"]
    assert victim.name in rows[1]["error"] and rows[1]["sidecar"] is None


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_linked_sidecar_is_skipped_named_and_fails_the_replay(
    tmp_path: Path, engine: str
) -> None:
    ring, _ = _ring_with_bad_sidecar(tmp_path, "link")
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"models:\n  image:\n    path: {tmp_path / 'brightness.onnx'}\n")
    out = tmp_path / ("r.parquet" if engine == "ray" else "r.jsonl")
    code, output = _run(
        ["replay", str(ring), "-c", str(cfg), "--engine", engine, "--out", str(out), "-q"]
    )
    assert code == 1, output
    assert "replayed 2 windows, 4 results" in output and "1 refused" in output
    named = [line for line in output.splitlines() if line.endswith("; window skipped")]
    assert len(named) == 1 and "symbolic link" in named[0], output
    assert '"?"' not in output  # no device without a sidecar in the per-device counts
