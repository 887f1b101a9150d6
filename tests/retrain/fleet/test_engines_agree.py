"""``replay`` and ``export`` on both engines: what they write and how they count odd windows.

* their outputs (the results file or folder, the picture, the training archive, the shards'
  index) take the mode the user's umask gives a new file, as ``cp`` or a shell redirect
  would: 0600 under ``umask 077``, 0644 under ``umask 022`` (they were 0644 whatever the
  umask);
* a sidecar whose archive is gone is a ``missing`` window on both engines: counted, named in
  the summary, exit 0 (the local engine refused it and exited 1, the Ray engine counted it
  as missing and exited 0);
* a window present twice (the same archive copied into two folders, or under two names) is
  scored and exported once on both engines: the copy is counted as a duplicate window and
  named in the summary (it was replayed twice).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.archive import open_archive
from cdml_edge.cli import app
from cdml_edge.store.sidecar import SIDECAR_SUFFIX, RetainedWindow

pytestmark = pytest.mark.slow

VALUES = [[10, 200], [250, 5, 60], [128, 140]]
ENGINES = ["local", "ray"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scored ring of three windows (no catalog: an upload) and a configuration."""
    base = tmp_path_factory.mktemp("agree")
    model = brightness_classifier(base / "brightness.onnx")
    scored_ring(base / "ring", model, VALUES)
    (base / "ring" / "catalog.sqlite").unlink()
    (base / "factory.yaml").write_text(f"models:\n  image:\n    path: {model}\n")
    return base


def _copy_ring(base: Path, to: Path) -> Path:
    ring = to / "device=edge-1" / "ring"
    shutil.copytree(base / "ring", ring)
    return ring


def _run(*args: object) -> tuple[int, str]:
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, r.output


def _replay(ring: Path, base: Path, out: Path, engine: str) -> tuple[int, str]:
    return _run("replay", ring, "-c", base / "factory.yaml", "--engine", engine, "--out", out, "-q")


def _export(ring: Path, out: Path, engine: str, *more: object) -> tuple[int, str]:
    return _run("export", ring, out, "--engine", engine, "-q", *more)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask077() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


# -- 1. outputs honour the umask ---------------------------------------------------------


@pytest.mark.usefixtures("ray_cluster", "umask077")
@pytest.mark.parametrize("engine", ENGINES)
def test_replay_outputs_take_the_mode_the_umask_gives(
    tmp_path: Path, base: Path, engine: str
) -> None:
    out = tmp_path / "new" / ("r.parquet" if engine == "ray" else "r.jsonl")
    code, output = _replay(base / "ring", base, out, engine)
    assert code == 0, output
    written = [out, *out.rglob("*")] if out.is_dir() else [out]
    if engine == "local":
        picture = out.with_suffix(".png")
        written += [picture] if picture.exists() else []
    files = {p: _mode(p) for p in written if p.is_file()}
    assert files and set(files.values()) == {0o600}, files
    folders = {p: _mode(p) for p in [out.parent, *written] if p.is_dir()}
    assert set(folders.values()) == {0o700}, folders


@pytest.mark.usefixtures("ray_cluster", "umask077")
@pytest.mark.parametrize("engine", ENGINES)
def test_export_outputs_take_the_mode_the_umask_gives(
    tmp_path: Path, base: Path, engine: str
) -> None:
    out = tmp_path / "t.zip"
    code, output = _export(base / "ring", out, engine)
    assert code == 0, output
    assert _mode(out) == 0o600
    # several shards and their index (the Ray engine) under a small bound
    if engine == "ray":
        code, output = _export(base / "ring", tmp_path / "s.zip", engine, "--max-bytes", "600")
        assert code == 0, output
        shards = sorted(tmp_path.glob("s-*-of-*.zip"))
        assert len(shards) > 1 and (tmp_path / "s.shards.json").is_file()
        assert {_mode(p) for p in [*shards, tmp_path / "s.shards.json"]} == {0o600}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ENGINES)
def test_under_umask_022_outputs_are_readable_by_all(
    tmp_path: Path, base: Path, engine: str
) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / ("r.parquet" if engine == "ray" else "r.jsonl")
        assert _replay(base / "ring", base, out, engine)[0] == 0
        assert _export(base / "ring", tmp_path / "t.tar.zst", engine)[0] == 0
    finally:
        os.umask(old)
    first = next(out.glob("*.parquet")) if out.is_dir() else out
    assert _mode(first) == 0o644 and _mode(tmp_path / "t.tar.zst") == 0o644


# -- 3. a sidecar whose archive is gone --------------------------------------------------


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ENGINES)
def test_an_archive_gone_is_missing_named_and_exits_0_on_both_engines(
    tmp_path: Path, base: Path, engine: str
) -> None:
    ring = _copy_ring(base, tmp_path / "in")
    gone = sorted(ring.glob("*.zip"))[1]
    gone.unlink()
    out = tmp_path / ("r.parquet" if engine == "ray" else "r.jsonl")
    code, output = _replay(ring, base, out, engine)
    assert code == 0, output
    assert "replayed 2 windows, 4 results" in output and "1 missing" in output
    assert "0 refused" in output
    assert gone.name in output and "cam1-w001" in output, output
    code, output = _export(ring, tmp_path / "t.zip", engine)
    assert code == 0, output
    assert "exported 4 items" in output and '"missing_windows": 1' in output
    assert '"refused_windows": 0' in output and gone.name in output, output


def test_an_archive_gone_with_the_catalog_is_missing_and_named_too(
    tmp_path: Path, base: Path
) -> None:
    """A ring with its catalog lists the window from its row: the same count, now named."""
    model = base / "brightness.onnx"
    ring = tmp_path / "ring"
    scored_ring(ring, model, VALUES)
    gone = sorted(ring.glob("*.zip"))[1]
    gone.unlink()
    code, output = _replay(ring, base, tmp_path / "r.jsonl", "local")
    assert code == 0 and "1 missing" in output and gone.name in output, output
    code, output = _export(ring, tmp_path / "t.zip", "local")
    assert code == 0 and '"missing_windows": 1' in output and gone.name in output, output
    assert '"corrupt": 0' in output


# -- 4. a window present twice -----------------------------------------------------------


def _renamed_copy(ring: Path, to: Path) -> Path:
    """The first window of ``ring`` copied into ``to`` under another name (same archive)."""
    sidecar = sorted(ring.glob(f"*{SIDECAR_SUFFIX}"))[0]
    rw = RetainedWindow.from_bytes(sidecar.read_bytes(), str(sidecar))
    stem = sidecar.name[: -len(SIDECAR_SUFFIX)] + ".again"
    archive = stem + ".zip"
    shutil.copy(ring / rw.archive.file, to / archive)
    moved = rw.model_copy(update={"archive": rw.archive.model_copy(update={"file": archive})})
    (to / (stem + SIDECAR_SUFFIX)).write_bytes(moved.to_bytes())
    return to / (stem + SIDECAR_SUFFIX)


def _local_lines(out: Path) -> list[str]:
    return out.read_text().splitlines()


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_present_twice_is_replayed_once(tmp_path: Path, base: Path, engine: str) -> None:
    ring = _copy_ring(base, tmp_path / "in")
    copy = _renamed_copy(ring, ring)  # local: one folder holds both
    if engine == "ray":  # and copied as it is into a second folder of the upload
        again = tmp_path / "in" / "device=edge-1" / "again"
        again.mkdir()
        first = sorted(ring.glob(f"*{SIDECAR_SUFFIX}"))[0]
        for f in ring.glob(first.name[: -len(SIDECAR_SUFFIX)] + ".*"):
            shutil.copy(f, again / f.name)
    root = tmp_path / "in" if engine == "ray" else ring
    out = tmp_path / ("r.parquet" if engine == "ray" else "r.jsonl")
    code, output = _replay(root, base, out, engine)
    assert code == 0, output
    dups = 2 if engine == "ray" else 1
    assert "replayed 3 windows, 7 results" in output, output
    assert f"{dups} duplicate windows" in output and copy.name in output, output
    if engine == "ray":
        table = pq.read_table(out)
        assert table.num_rows == 7 and len(set(table.column("id").to_pylist())) == 7
    else:
        lines = _local_lines(out)
        assert len(lines) == 7 and len({json.loads(x)["id"] for x in lines}) == 7


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_present_twice_is_exported_once(tmp_path: Path, base: Path, engine: str) -> None:
    ring = _copy_ring(base, tmp_path / "in")
    copy = _renamed_copy(ring, ring)
    root = tmp_path / "in" if engine == "ray" else ring
    code, output = _export(root, tmp_path / "t.zip", engine)
    assert code == 0, output
    assert "exported 7 items from 3 windows" in output, output
    assert '"duplicate_windows": 1' in output and copy.name in output, output
    with open_archive(tmp_path / "t.zip") as arc:
        assert len([n for n in arc.names() if n != "manifest.json"]) == 7
