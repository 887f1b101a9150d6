"""``cdml-edge replay`` killed while writing, run again.

``--out`` is written atomically: the results go to a temporary file beside it
(``.tmp-XXXXXXXX.jsonl``) renamed over it at the end, the picture to a staging folder
(``.tmp-XXXXXXXX.stage``). Ctrl-C removes them; ``kill -9``, the OOM killer or a power cut
does not, and the next replay left them there, hidden: a results file grows about 440
bytes per item, so each killed replay of a million items kept 440 MB.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.cli import app


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("replay-hostile")
    model = brightness_classifier(base / "brightness.onnx")
    scored_ring(base / "ring", model, [[10, 200], [250, 5, 60]])
    cfg = {
        "device": {"id": "edge-1"},
        "models": {"image": {"path": "brightness.onnx"}},
        "retention": {"dir": "ring", "max_bytes": "64MiB"},
    }
    (base / "factory.yaml").write_text(yaml.safe_dump(cfg))
    return base


def _aged(path: Path, age: float) -> Path:
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def _temp_results(folder: Path, tag: str, age: float) -> Path:
    path = folder / f".tmp-{tag}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # as mkstemp makes it
    os.write(fd, b'{"id":"x"}\n' * 1000)
    os.close(fd)
    return _aged(path, age)


def _stage(folder: Path, tag: str, age: float) -> Path:
    stage = folder / f".tmp-{tag}.stage"
    stage.mkdir(mode=0o700)
    (stage / "results.png").write_bytes(b"\x89PNG\r\n")
    _aged(stage / "results.png", age)
    return _aged(stage, age)


def test_what_a_killed_replay_left_is_removed_by_the_next(setup: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    killed = _temp_results(tmp_path, "q8r7s6t5", age=3600)
    picture = _stage(tmp_path, "u4v3w2x1", age=3600)
    writing = _temp_results(tmp_path, "live0002", age=1)  # another replay writing now
    mine = tmp_path / ".tmp-mynotes.jsonl"  # not a name the writer makes
    mine.write_text("keep")
    _aged(mine, 3600)
    r = CliRunner().invoke(
        app, ["replay", "--config", str(setup / "factory.yaml"), "--out", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    assert out.is_file()
    assert not killed.exists() and not picture.exists(), sorted(os.listdir(tmp_path))
    assert writing.exists() and mine.exists()
    assert f"{killed}: removed" in r.output, r.output


@pytest.mark.parametrize("name", ["window", "sidecar", "catalog.sqlite"])
def test_replay_out_over_a_file_of_the_ring_is_refused(setup: Path, name: str) -> None:
    # --out ring/<tab> replaced a retained window's archive (or its sidecar, the catalog)
    # with JSON lines
    ring = setup / "ring"
    if name == "window":
        target = sorted(ring.glob("*.zip"))[0]
    elif name == "sidecar":
        target = sorted(ring.glob("*.window.json"))[0]
    else:
        target = ring / name
    before = target.read_bytes()
    r = CliRunner().invoke(
        app, ["replay", "--config", str(setup / "factory.yaml"), "--out", str(target), "-q"]
    )
    assert r.exit_code == 2, r.output
    assert target.name in r.output and "retention" in r.output, r.output
    assert target.read_bytes() == before
