"""``replay`` / ``export`` when the selection matches nothing, and what replay names once.

A ``--source`` typo used to replay 0 windows with exit 0 and no hint; the ring's sources are
now named. A corrupt window was printed twice (a log warning and the error line), and a
``--model`` that is a device or a folder was "no such model file".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner, Result

from cdml_edge.cli import app

T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z: the first window closes 5 s later


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("selection")
    model = brightness_classifier(base / "brightness.onnx")
    scored_ring(base / "ring", model, [[10, 200], [250, 5, 60]], t0=T0, source="cam1")
    scored_ring(base / "ring", model, [[10, 200]], t0=T0 + 100, source="cam2")
    cfg = {
        "device": {"id": "edge-1"},
        "models": {"image": {"path": "brightness.onnx"}},
        "retention": {"dir": "ring", "max_bytes": "64MiB"},
    }
    (base / "factory.yaml").write_text(yaml.safe_dump(cfg))
    return base


HELD = (
    "the ring holds 3 windows of sources cam1, cam2, "
    "closed 2026-09-21T14:13:25Z to 2026-09-21T14:15:05Z"
)


def _replay(base: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["replay", "--config", str(base / "factory.yaml"), "-q", *args])


def _export(base: Path, out: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["export", str(base / "ring"), str(out), "-q", *args])


def test_replay_of_a_source_the_ring_lacks_names_the_sources_it_holds(
    base: Path, tmp_path: Path
) -> None:
    out = tmp_path / "typo.jsonl"
    r = _replay(base, "--source", "cam3", "--out", str(out))
    assert r.exit_code == 1, r.output  # as export: nothing selected is a failed run
    assert "--source cam3: no window of that source" in r.output, r.output
    assert HELD in r.output, r.output
    assert "Traceback" not in r.output
    assert not out.exists()  # refused before any window is read or any file written


def test_export_of_a_source_the_ring_lacks_names_the_sources_it_holds(
    base: Path, tmp_path: Path
) -> None:
    r = _export(base, tmp_path / "typo.zip", "--source", "cam3")
    assert r.exit_code == 1, r.output
    assert "nothing to export" in r.output and "--source cam3: no window of that source" in r.output
    assert HELD in r.output, r.output
    r = _export(base, tmp_path / "typo.zip", "--filter", "source=cam3")
    assert r.exit_code == 1 and HELD in r.output, r.output


def test_a_time_range_with_no_window_is_said_and_replays_nothing(
    base: Path, tmp_path: Path
) -> None:
    """A quiet day is no failure for the nightly ``--since 1d`` replay: exit 0, said."""
    out = tmp_path / "later.jsonl"
    r = _replay(base, "--since", "2040-01-01", "--source", "cam1", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "replayed 0 windows" in r.output
    assert f"no window matches --source cam1 --since 2040-01-01 ({HELD})" in r.output, r.output
    assert out.read_bytes() == b""
    r = _export(base, tmp_path / "later.zip", "--since", "2040-01-01")
    assert r.exit_code == 1 and "nothing to export" in r.output and HELD in r.output, r.output


def test_a_selection_that_matches_says_nothing_more(base: Path, tmp_path: Path) -> None:
    r = _replay(base, "--source", "cam2", "--out", str(tmp_path / "cam2.jsonl"))
    assert r.exit_code == 0, r.output
    assert "replayed 1 window, 2 results" in r.output and "holds" not in r.output


def test_a_corrupt_window_is_named_once(base: Path, tmp_path: Path) -> None:
    """The real command, as a shell runs it: logging unconfigured, stderr a pipe."""
    ring = tmp_path / "ring"
    ring.mkdir()
    for f in (base / "ring").iterdir():
        (ring / f.name).write_bytes(f.read_bytes())
    victim = sorted(ring.glob("*.zip"))[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: its SHA-256 no longer matches
    victim.write_bytes(bytes(data))
    cfg = ["--config", str(base / "factory.yaml"), "--out", str(tmp_path / "o.jsonl"), "-q"]
    code = "from cdml_edge.entry import main; main()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run(
        [sys.executable, "-c", code, "replay", str(ring), *cfg],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 corrupt windows skipped" in r.stdout
    assert (r.stdout + r.stderr).count(victim.name) == 1, r.stdout + r.stderr


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"), (".", "a folder")])
def test_a_model_path_that_is_not_a_regular_file_says_what_it_is(
    base: Path, path: str, kind: str
) -> None:
    r = _replay(base, "--model", path)
    assert r.exit_code == 2, r.output
    assert f"{path}: not a regular file ({kind}) (--model)" in r.output, r.output
    assert "no such" not in r.output
    r = _replay(base, "--model", str(base / "absent.onnx"))
    assert r.exit_code == 2 and "absent.onnx: no such model file (--model)" in r.output, r.output
