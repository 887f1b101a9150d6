"""Fleet jobs reading ``s3://`` on a local 2-CPU Ray.

``s3://`` is moto's server on loopback behind a counting proxy. Checked: the same results as the
local commands, and the requests each archive costs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import make_window, scored_ring
from helpers.s3_server import S3Server

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import export_trainset, replay_to_jsonl
from cdml_edge.retrain.export_job import ExportOptions, parse_selection
from cdml_edge.retrain.fleet import S3Options
from cdml_edge.retrain.fleet.scorer import ship_models
from cdml_edge.store.retention import RetentionRing

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

BUCKET = "fleet"
T0 = 1_790_000_000.0
VALUES = [[10, 200, 30, 240], [250, 5, 60], [128, 140, 90, 220, 15], [60, 230]]


def _upload(s3: S3Server, folder: Path, prefix: str) -> list[str]:
    keys = []
    for f in sorted(folder.iterdir()):
        if f.name != "catalog.sqlite":
            keys.append(f"{prefix}/{f.name}")
            s3.put(BUCKET, keys[-1], f.read_bytes())
    return keys


@pytest.fixture(scope="module")
def uploaded(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fleet-s3")
    model = brightness_classifier(base / "brightness.onnx")
    scored_ring(base / "ring", model, VALUES, t0=T0)
    date = time.strftime("%Y-%m-%d", time.gmtime(T0))
    _upload(s3_server, base / "ring", f"line3/device=edge-1/date={date}")
    return {"ring": base / "ring", "model": model}


def _gets(s3: S3Server, key: str) -> list:  # type: ignore[type-arg]
    """GETs of one key (the proxy sees ``=`` in keys URL-encoded)."""
    return [g for g in s3.proxy.seen("GET") if unquote(g.path.split("?")[0]).endswith("/" + key)]


def _options(s3_server: S3Server) -> S3Options:
    return S3Options(endpoint_url=s3_server.proxy.url, region="us-east-1")


def test_export_from_s3_is_the_local_export_and_costs_one_get_per_file(
    s3_server: S3Server, uploaded: dict[str, Path], tmp_path: Path
) -> None:
    from cdml_edge.retrain.fleet import fleet_export

    opts = ExportOptions(uploaded["ring"], tmp_path / "local.zip", split="0.8/0.2")
    sel = parse_selection(opts)
    export_trainset(uploaded["ring"], opts.out, split=sel.split, describe=sel.describe(opts))
    s3_server.proxy.reset()
    got = fleet_export(
        f"s3://{BUCKET}/line3",
        tmp_path / "fleet.zip",
        sel,
        describe=sel.describe(opts),
        s3=_options(s3_server),
    )
    assert (tmp_path / "fleet.zip").read_bytes() == opts.out.read_bytes()
    gets = s3_server.proxy.seen("GET")
    objects = [g for g in gets if "list-type=2" not in g.path]
    archives = [g for g in objects if g.path.split("?")[0].endswith(".zip")]
    sidecars = [g for g in objects if g.path.split("?")[0].endswith(".window.json")]
    # small archives are fetched whole: one GET each; a sidecar is read in both passes
    assert len(archives) == 4 and len(sidecars) == 2 * 4 and len(objects) == 12
    assert got.s3_requests == 12 and got.list_requests == len(gets) - len(objects) == 3
    assert all(g.status in (200, 206) for g in gets)


def test_large_archives_are_read_by_ranges(s3_server: S3Server, tmp_path: Path) -> None:
    from cdml_edge.retrain.fleet import fleet_export

    ring = tmp_path / "ring"
    store = RetentionRing(ring, max_bytes=10**9, fsync=False)
    files = [(f"blob_{i}.bin", os.urandom(100_000)) for i in range(4)]
    archive, manifest = make_window("big-w1", T0, files, labels=["keep", "b", "b", "b"])
    assert store.store(archive, manifest).stored
    store.close()
    keys = _upload(s3_server, ring, "big/device=edge-9")
    archive_key = next(k for k in keys if k.endswith(".zip"))
    sel = parse_selection(ExportOptions(ring, tmp_path / "x.zip", filters=("label=keep",)))
    s3_server.proxy.reset()
    got = fleet_export(
        f"s3://{BUCKET}/big",
        tmp_path / "keep.zip",
        sel,
        s3=_options(s3_server),
        whole_limit=64 << 10,
    )
    assert got.stats.exported == 1 and got.stats.filtered == 3
    reads = _gets(s3_server, archive_key)
    # the tail (128 KiB, which holds the central directory), then the one member picked
    assert [r.range for r in reads][0] == "bytes=-131072" and len(reads) == 2
    fetched = sum(r.body_bytes for r in reads)
    assert fetched < len(archive) * 0.7, (fetched, len(archive))
    s3_server.proxy.reset()
    fleet_export(f"s3://{BUCKET}/big", tmp_path / "whole.zip", sel, s3=_options(s3_server))
    whole = _gets(s3_server, archive_key)
    assert len(whole) == 1 and whole[0].body_bytes == len(archive)
    assert (tmp_path / "whole.zip").read_bytes() == (tmp_path / "keep.zip").read_bytes()


def test_replay_from_s3_gives_the_local_replay_lines(
    s3_server: S3Server, uploaded: dict[str, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from cdml_edge.retrain.fleet import fleet_replay

    runners = load_runners({"image": (uploaded["model"], ModelOverrides())}, warm_up=False)
    local = replay_to_jsonl(uploaded["ring"], runners, tmp_path / "local.jsonl")
    s3_server.proxy.reset()
    got = fleet_replay(
        f"s3://{BUCKET}/line3",
        ship_models(runners, {}, [uploaded["model"]]),
        local.models,
        tmp_path / "res.parquet",
        s3=_options(s3_server),
    )
    rows = sorted(
        pq.read_table(tmp_path / "res.parquet").to_pylist(),
        key=lambda r: (r["closed_at"], r["window_id"], r["position"]),
    )
    assert "".join(r["record"] + "\n" for r in rows) == (tmp_path / "local.jsonl").read_text()
    assert got.stats.items == local.items and got.archives == 4
    assert got.s3_requests == 2 * 4  # the sidecar and the whole archive of each window


def test_a_missing_bucket_is_a_failed_run_naming_it(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdml_edge.archive.s3 import ENDPOINT_ENV
    from cdml_edge.retrain.errors import ExportError
    from cdml_edge.retrain.fleet.jobs import EngineOptions, export_on

    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    opts = ExportOptions(Path("unused"), tmp_path / "o.zip")
    with pytest.raises(ExportError, match="s3://no-such-bucket/"):
        export_on(EngineOptions("ray", quiet=True), opts, "s3://no-such-bucket/fleet")
