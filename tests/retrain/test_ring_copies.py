"""Replay and export of a ring copied from a board: the files are the truth, not the catalog."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier
from helpers.retention_data import make_window
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.retrain import export_trainset
from cdml_edge.store.catalog import CATALOG_NAME
from cdml_edge.store.retention import RetentionRing
from cdml_edge.store.sidecar import list_retained, scan_retained

T0 = 1_790_000_000.0


def _stale_ring(ring: Path, windows: int = 3) -> None:
    """A ring whose catalog was copied before its last window landed.

    As ``rsync -a`` of a ring beside a live agent, or a board cut off between a window's
    commit (its sidecar renamed in) and its catalog row, leaves it.
    """
    store = RetentionRing(ring, max_bytes=10**8, fsync=False)
    for w in range(windows):
        if w == windows - 1:
            shutil.copy2(ring / CATALOG_NAME, ring.parent / "catalog.old")
        files = [(f"w{w}_{i}.jpg", jpeg(40 * w + 100 * i)) for i in range(2)]
        archive, m = make_window(f"cam1-w{w}", T0 + 10 * w, files, labels=["ok", "defect"])
        assert store.store(archive, m).stored
    store.close()
    shutil.copy2(ring.parent / "catalog.old", ring / CATALOG_NAME)


def test_listing_reads_the_sidecars_the_catalog_lacks(tmp_path: Path) -> None:
    _stale_ring(tmp_path / "ring")
    records = list_retained(tmp_path / "ring")
    assert [r.window_id for r in records] == ["cam1-w0", "cam1-w1", "cam1-w2"]
    assert [r.window_id for r in list_retained(tmp_path / "ring", since=T0 + 15)] == ["cam1-w2"]
    assert [r.window_id for r in list_retained(tmp_path / "ring", until=T0 + 15)] == [
        "cam1-w0",
        "cam1-w1",
    ]
    assert scan_retained(tmp_path / "ring", source="cam2").records == []


def test_export_of_a_ring_whose_catalog_is_older_than_its_files(tmp_path: Path) -> None:
    """The window the catalog lacked used to be left out of the export, silently (exit 0)."""
    _stale_ring(tmp_path / "ring")
    st = export_trainset(tmp_path / "ring", tmp_path / "train.zip")
    assert st.windows == 3 and st.exported == 6 and not st.refused


def test_replay_of_a_ring_whose_catalog_is_older_than_its_files(tmp_path: Path) -> None:
    windows = 3
    model = brightness_classifier(tmp_path / "brightness.onnx")
    _stale_ring(tmp_path / "ring", windows)
    cfg = {"device": {"id": "edge-1"}, "models": {"image": {"path": model.name}}}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(
        app,
        ["replay", str(tmp_path / "ring"), "--config", str(tmp_path / "f.yaml"), "-q"]
        + ["--out", str(tmp_path / "r.jsonl")],
    )
    assert r.exit_code == 0, r.output
    assert f"replayed {windows} windows, {2 * windows} results" in r.output


def test_a_ring_opened_by_the_agent_is_not_read_twice(tmp_path: Path) -> None:
    """Once the agent has opened the ring (its catalog reconciled) each window is listed once."""
    _stale_ring(tmp_path / "ring")
    RetentionRing(tmp_path / "ring", max_bytes=10**8, fsync=False).close()
    assert [r.window_id for r in list_retained(tmp_path / "ring")] == [
        "cam1-w0",
        "cam1-w1",
        "cam1-w2",
    ]


def test_a_window_refused_for_its_archive_names_the_archive(tmp_path: Path) -> None:
    """Without a catalog, an archive that is a link used to be reported as the sidecar."""
    ring = tmp_path / "ring"
    _stale_ring(ring, 2)
    (ring / CATALOG_NAME).unlink()
    [first, _] = sorted(ring.glob("*.zip"))
    first.unlink()
    first.symlink_to("/dev/zero")
    listing = scan_retained(ring)
    [(name, reason)] = listing.skipped
    assert name == first.name.replace(".zip", ".window.json")
    assert reason.startswith(f"{first.name}: a symbolic link")
