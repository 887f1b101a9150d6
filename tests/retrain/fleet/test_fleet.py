"""Fleet replay and export on a local 2-CPU Ray: the same results as the local commands.

The fleet is a hive-partitioned folder tree (``device=…/date=…``) of real retention rings,
scored by the live pipeline with a real ONNX model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner

from cdml_edge.archive import open_archive
from cdml_edge.cli import app
from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import export_trainset, parse_filter, replay_to_jsonl
from cdml_edge.retrain.export import ExportStats, select_items
from cdml_edge.retrain.export_job import ExportOptions, parse_selection
from cdml_edge.retrain.fleet import list_windows
from cdml_edge.retrain.fleet.rows import ItemSelection, PlanRows, Scope, WindowRows
from cdml_edge.retrain.fleet.scorer import ship_models
from cdml_edge.store.sidecar import list_retained

pytestmark = pytest.mark.slow

T0 = {"edge-1": 1_790_000_000.0, "edge-2": 1_790_100_000.0}
VALUES = {
    "edge-1": [[10, 200, 30, 240], [250, 5, 60], [128, 140, 90, 220, 15]],
    "edge-2": [[60, 230], [35, 180, 99], [201]],
}


@dataclass
class Fleet:
    root: Path
    model: Path
    rings: dict[str, Path]  # device -> its ring folder inside root
    merged: Path  # every window of the fleet in one plain folder (for the local commands)


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    base = tmp_path_factory.mktemp("fleet")
    model = brightness_classifier(base / "brightness.onnx")
    rings = {}
    merged = base / "merged"
    merged.mkdir()
    for device, values in VALUES.items():
        ring = base / "root" / f"device={device}" / f"date={_date(T0[device])}"
        source = "cam1" if device == "edge-1" else "cam2"  # window ids unique in the fleet
        scored_ring(ring, model, values, t0=T0[device], device=device, source=source)
        (ring / "catalog.sqlite").unlink()  # an upload holds the windows, not the catalog
        for f in ring.iterdir():
            shutil.copy(f, merged / f.name)
        rings[device] = ring
    return Fleet(base / "root", model, rings, merged)


def _runners(model: Path):  # type: ignore[no-untyped-def]
    return load_runners({"image": (model, ModelOverrides())}, warm_up=False)


def _shipment(model: Path):  # type: ignore[no-untyped-def]
    return ship_models(_runners(model), {}, [model])


# -- without Ray: listing and the per-window rows -------------------------------------------


def test_listing_pairs_sidecars_with_archives_and_reads_partitions(fleet: Fleet) -> None:
    listing = list_windows(str(fleet.root))
    assert len(listing.windows) == 6 and listing.partition_keys == ("date", "device")
    w = listing.windows[0]
    assert w.archive is not None and w.archive.endswith(".zip") and w.archive_bytes > 0
    assert dict(w.partitions) == {"device": "edge-1", "date": _date(T0["edge-1"])}
    # a date folder wholly before --since is not walked
    later = list_windows(str(fleet.root), since=T0["edge-2"] - 10)
    assert {dict(r.partitions)["device"] for r in later.windows} == {"edge-2"}
    assert later.pruned_folders == 1


def test_plan_rows_pick_what_the_local_export_picks(fleet: Fleet) -> None:
    ring = fleet.rings["edge-1"]
    refs = list_windows(str(ring)).windows
    filters = [parse_filter("score>0.6")]
    local = select_items(ring, list_retained(ring), filters, None, (0.5, 0.5), ExportStats())
    plan = PlanRows(Scope(), ItemSelection(filters, None, (0.5, 0.5)))
    rows = [row for ref in refs for row in plan.rows(ref)]
    picks = [r for r in rows if r["status"] == "pick"]
    assert [(r["member"], r["size"]) for r in picks] == [(p.member, p.item.size) for p in local]
    counters = [json.loads(r["stats"]) for r in rows if r["status"] == "window"]
    assert sum(c["items_seen"] for c in counters) == 12 and len(counters) == 3


def test_a_tampered_archive_is_a_corrupt_row_naming_the_file(tmp_path: Path, fleet: Fleet) -> None:
    ring = tmp_path / "ring"
    shutil.copytree(fleet.rings["edge-1"], ring)
    victim = sorted(ring.glob("*.zip"))[1]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF  # same size, other bytes (inside the first member)
    victim.write_bytes(bytes(data))
    rows = [r for ref in list_windows(str(ring)).windows for r in WindowRows(Scope()).rows(ref)]
    assert [r["status"] for r in rows] == ["ok", "corrupt", "ok"]
    assert victim.name in rows[1]["error"] and "SHA-256" in rows[1]["error"]
    assert rows[1]["archive"] is None and rows[0]["archive"] is not None


def test_whatever_a_window_raises_is_a_row_not_a_failed_task(fleet: Fleet) -> None:
    class Exploding(WindowRows):
        def window_rows(self, ref, rw, count):  # type: ignore[no-untyped-def]
            raise RuntimeError("zstd: corrupted block")

    ref = list_windows(str(fleet.rings["edge-1"])).windows[0]
    (row,) = Exploding(Scope()).rows(ref)
    assert row["status"] == "corrupt" and row["error"] == "RuntimeError: zstd: corrupted block"
    assert row["window_id"] == "cam1-w000" and row["location"] == ref.sidecar
    gone = dataclasses.replace(ref, sidecar=ref.sidecar + ".gone.window.json")
    (row,) = WindowRows(Scope()).rows(gone)
    assert row["status"] == "missing" and "gone" in row["error"]


def test_a_copy_of_a_window_is_left_out_of_the_listing_unread(tmp_path: Path, fleet: Fleet) -> None:
    """The same archive in two folders: the second in path order is a copy, named."""
    from cdml_edge.retrain.fleet.rows import drop_copies

    root = tmp_path / "root"
    shutil.copytree(fleet.root, root)
    again = root / "device=edge-1" / "zz-again"
    again.mkdir()
    first = sorted(fleet.rings["edge-1"].glob("*.window.json"))[0]
    for f in fleet.rings["edge-1"].glob(first.name.split(".window.json")[0] + ".*"):
        shutil.copy(f, again / f.name)
    refs = list_windows(str(root)).windows
    copies = drop_copies(refs, Scope())
    assert len(refs) == 7 and len(copies.windows) == 6
    [(copy, kept)] = copies.duplicates
    assert "zz-again" in copy and kept.endswith(first.name) and "zz-again" not in kept
    # outside the selection: no row either way, so not counted as a copy
    assert drop_copies(refs, Scope(source="nope")).duplicates == []
    # a window whose archive is gone is nobody's copy: left for the read task (missing)
    (again / first.name.replace(".window.json", ".zip")).unlink()
    assert drop_copies(list_windows(str(root)).windows, Scope()).duplicates == []


# -- on Ray ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_fleet_export_is_the_local_export_byte_for_byte(
    tmp_path: Path, fleet: Fleet, fmt: str
) -> None:
    from cdml_edge.retrain.fleet import fleet_export

    opts = ExportOptions(
        fleet.merged, tmp_path / f"local.{fmt}", filters=("score>0.6",), split="0.7/0.3"
    )
    sel = parse_selection(opts)
    local = export_trainset(
        fleet.merged, opts.out, filters=sel.filters, split=sel.split, describe=sel.describe(opts)
    )
    out = tmp_path / f"fleet.{fmt}"
    got = fleet_export(str(fleet.root), out, sel, describe=sel.describe(opts))
    assert out.read_bytes() == opts.out.read_bytes()
    assert got.stats.exported == local.exported > 0 and got.stats.filtered == local.filtered
    assert got.stats.classes == local.classes and got.stats.splits == local.splits
    assert got.stats.windows == local.windows == 6 and len(got.shards) == 1


@pytest.mark.usefixtures("ray_cluster")
def test_fleet_export_shards_hold_the_local_members_and_read_as_datasets(
    tmp_path: Path, fleet: Fleet
) -> None:
    from cdml_edge.data.dataset import CDMLStreamDataset
    from cdml_edge.retrain.fleet import fleet_export

    opts = ExportOptions(fleet.merged, tmp_path / "local.zip")
    export_trainset(fleet.merged, opts.out)
    with open_archive(opts.out) as arc:
        local = {n: arc.read(n) for n in arc.names() if n != "manifest.json"}
    sel = parse_selection(ExportOptions(fleet.root, tmp_path / "x.zip", max_bytes="4KiB"))
    got = fleet_export(str(fleet.root), tmp_path / "train.zip", sel)
    assert len(got.shards) > 2 and f"-> {tmp_path / 'train.shards.json'} " in got.text()
    index = json.loads((tmp_path / "train.shards.json").read_text())
    assert [s["file"] for s in index["shards"]] == [Path(s["file"]).name for s in got.shards]
    seen: dict[str, bytes] = {}
    for s in got.shards:
        path = Path(s["file"])
        assert path.name.startswith("train-") and path.stat().st_size == s["bytes"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == s["sha256"]
        ds = CDMLStreamDataset(path, modality="image", labels="folder")
        members = {n: ds.read(i) for i, n in enumerate(ds.names)}
        assert sum(len(b) for b in members.values()) <= 4096 or len(members) == 1
        with open_archive(path) as arc:
            prov = json.loads(arc.read("manifest.json"))
        assert sorted(p["member"] for p in prov["items"]) == sorted(members)
        assert prov["shard"]["count"] == len(got.shards)
        seen.update(members)
    assert seen == local and got.stats.exported == len(local)


@pytest.mark.usefixtures("ray_cluster")
def test_fleet_replay_gives_the_local_replay_lines_and_summary(
    tmp_path: Path, fleet: Fleet
) -> None:
    import pyarrow.parquet as pq

    from cdml_edge.retrain.fleet import fleet_replay

    local = replay_to_jsonl(fleet.merged, _runners(fleet.model), tmp_path / "local.jsonl")
    got = fleet_replay(
        str(fleet.root),
        _shipment(fleet.model),
        {"image": "brightness@1.0.0"},
        tmp_path / "results.parquet",
    )
    table = pq.read_table(tmp_path / "results.parquet").to_pylist()
    table.sort(key=lambda r: (r["closed_at"], r["window_id"], r["position"]))
    lines = "".join(r["record"] + "\n" for r in table)
    assert lines == (tmp_path / "local.jsonl").read_text()
    assert (
        {r["device"] for r in table}
        == {"edge-1", "edge-2"}
        == {r["partition_device"] for r in table}
    )
    assert all(r["label"] == r["was_label"] for r in table)
    for k in (
        "windows",
        "items",
        "failures",
        "changed_labels",
        "changed_anomalies",
        "bytes_read",
        "models",
    ):
        assert getattr(got.stats, k) == getattr(local, k), k
    assert got.by_device == {
        "edge-1": {
            "brightness@1.0.0": {
                "items": 12,
                "failures": 0,
                "changed_labels": 0,
                "changed_anomalies": 0,
            }
        },
        "edge-2": {
            "brightness@1.0.0": {
                "items": 6,
                "failures": 0,
                "changed_labels": 0,
                "changed_anomalies": 0,
            }
        },
    }


@pytest.mark.usefixtures("ray_cluster")  # alone (or first on an xdist worker) it had no Ray
def test_fleet_replay_decodes_within_the_given_limits(tmp_path: Path, fleet: Fleet) -> None:
    """The actors decode with the configuration's limits, not only their own defaults."""
    from cdml_edge.decode import DecodeLimits
    from cdml_edge.retrain.fleet import fleet_replay

    got = fleet_replay(
        str(fleet.root),
        _shipment(fleet.model),
        {"image": "brightness@1.0.0"},
        tmp_path / "results.parquet",
        limits=DecodeLimits(max_pixels=100),  # each item is a 32x32 JPEG
    )
    assert got.stats.failures == 18 and got.stats.items == 0, got.stats  # none scored


@pytest.mark.usefixtures("ray_cluster")
def test_corrupt_windows_are_skipped_counted_and_listed(tmp_path: Path, fleet: Fleet) -> None:
    import pyarrow.parquet as pq

    from cdml_edge.retrain.fleet import fleet_export, fleet_replay, read_items

    root = tmp_path / "root"
    shutil.copytree(fleet.root, root)
    zips = sorted(root.rglob("*.zip"))
    tampered, garbage = zips[1], zips[4]
    data = bytearray(tampered.read_bytes())
    data[100] ^= 0xFF  # inside the first member
    tampered.write_bytes(bytes(data))
    garbage.write_bytes(b"not an archive" * 50)
    got = fleet_replay(str(root), _shipment(fleet.model), {}, tmp_path / "r.parquet")
    assert got.stats.corrupt == 2 and got.stats.windows == 4 and got.stats.missing == 0
    assert any(tampered.name in e for e in got.stats.errors)
    assert any(garbage.name in e for e in got.stats.errors)
    assert got.stats.items == pq.read_table(tmp_path / "r.parquet").num_rows
    sel = parse_selection(ExportOptions(root, tmp_path / "t.zip"))
    ex = fleet_export(str(root), tmp_path / "t.zip", sel)
    # export checks members, as the local export does: the bad one, and all of the garbage
    assert ex.stats.windows == 6 and ex.stats.corrupt == 1 + 3 and ex.stats.exported == 14
    rows = read_items(str(root)).take_all()
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    assert by_status == {"ok": 14, "corrupt": 4}


@pytest.mark.usefixtures("ray_cluster")
def test_a_window_retained_twice_is_exported_once(tmp_path: Path, fleet: Fleet) -> None:
    from cdml_edge.retrain.fleet import fleet_export

    root = tmp_path / "root"
    shutil.copytree(fleet.root, root)
    again = root / "device=edge-1" / "date=again"  # uploaded a second time, elsewhere
    again.mkdir()
    first = sorted(fleet.rings["edge-1"].glob("*.window.json"))[0]
    for f in fleet.rings["edge-1"].glob(first.name.split(".window.json")[0] + ".*"):
        shutil.copy(f, again / f.name)
    export_trainset(fleet.merged, tmp_path / "local.zip")
    sel = parse_selection(ExportOptions(root, tmp_path / "t.zip"))
    got = fleet_export(str(root), tmp_path / "t.zip", sel)
    # the copy is left out as a window (the same archive SHA-256), not read: its items are
    # not duplicates of items, and it is named once
    assert got.stats.duplicate_windows == 1 and got.duplicates == 0 and got.errors == []
    assert got.stats.exported == 18 and got.stats.windows == 6
    [note] = got.stats.notes
    assert "date=again" in note and "skipped as a duplicate window" in note
    with open_archive(tmp_path / "t.zip") as a, open_archive(tmp_path / "local.zip") as b:
        assert a.names() == b.names()


@pytest.mark.usefixtures("ray_cluster")
def test_read_items_gives_every_item_with_its_bytes_and_results(fleet: Fleet) -> None:
    from cdml_edge.retrain.fleet import read_items

    rows = read_items(str(fleet.root)).take_all()
    assert len(rows) == 18 and {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert hashlib.sha256(r["data"]).hexdigest() == r["sha256"]
        assert r["label"] in ("dark", "bright") and r["model"] == "brightness"
        assert r["partition_device"] == r["device"] and r["date"] == _date(r["closed_at"])
        value = int(r["name"].rsplit("_", 1)[1].split(".")[0])
        assert r["label"] == ("bright" if value > 127 else "dark")


# -- the command line -----------------------------------------------------------------------


@pytest.mark.usefixtures("ray_cluster")
def test_cli_engine_ray_export_and_replay(tmp_path: Path, fleet: Fleet) -> None:
    import pyarrow.parquet as pq

    runner = CliRunner()
    r = runner.invoke(app, ["export", str(fleet.merged), str(tmp_path / "local.zip"), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app, ["export", str(fleet.root), str(tmp_path / "fleet.zip"), "--engine", "ray", "-q"]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fleet.zip").read_bytes() == (tmp_path / "local.zip").read_bytes()
    assert "exported 18 items from 6 windows" in r.output
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"models:\n  image:\n    path: {fleet.model}\n")
    r = runner.invoke(
        app,
        [
            "replay",
            str(fleet.root),
            "--config",
            str(cfg),
            "--engine",
            "ray",
            "--out",
            str(tmp_path / "res.parquet"),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "replayed 6 windows, 18 results" in r.output
    assert pq.read_table(tmp_path / "res.parquet").num_rows == 18
    r = runner.invoke(
        app, ["replay", str(fleet.root), "--config", str(cfg), "--engine", "ray", "--publish"]
    )
    assert r.exit_code == 2 and "--engine local" in r.output


def test_cli_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from cdml_edge.cli import app\n"
        f"app(['export', {str(tmp_path)!r}, {str(tmp_path / 'o.zip')!r}, '--engine', 'ray'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'cdml-edge[ray]'" in r.stderr


def test_cli_local_engine_refuses_s3_inputs() -> None:
    r = CliRunner().invoke(app, ["export", "s3://bucket/fleet", "o.zip"])
    assert r.exit_code == 2 and "--engine ray" in r.output


@pytest.mark.usefixtures("ray_cluster")
def test_an_address_unlike_the_ray_already_running_here_is_an_error() -> None:
    """``--ray-address`` was ignored when Ray already ran in the process (a notebook)."""
    import ray

    from cdml_edge.retrain.errors import OptionError
    from cdml_edge.retrain.fleet import RaySettings, ray_session

    running = ray.get_runtime_context().gcs_address
    with pytest.raises(OptionError) as err, ray_session(RaySettings(address="10.9.8.7:6379")):
        pass
    assert "10.9.8.7:6379" in str(err.value) and running in str(err.value)
    for same in (running, "auto", f"ray://{running}"):
        with ray_session(RaySettings(address=same)):
            assert ray.is_initialized()
    assert ray.is_initialized()  # the running one is left as it was
