"""``--engine ray`` on a real two-node cluster: ``ray start --head``, a node joining it.

The jobs are sent as operators send them: ``cdml-edge ... --engine ray --ray-address``,
from a process of their own, reading ``s3://`` (moto's server on loopback). The nodes have
the S3 credentials but not the endpoint, and see the model only as the job ships it. The
results must equal the local engine's byte for byte, and the joined node must have worked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.models import brightness_classifier
from helpers.ray_nodes import RayNodes, node_env, node_ports
from helpers.retention_data import scored_ring
from helpers.s3_server import S3Server

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain import export_trainset, replay_to_jsonl
from cdml_edge.retrain.export_job import ExportOptions, parse_selection

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray-cluster")]

BUCKET = "cluster"
T0 = {"edge-1": 1_790_000_000.0, "edge-2": 1_790_100_000.0}
VALUES = {"edge-1": [[10, 200, 30], [250, 5]], "edge-2": [[60, 230], [35, 180, 99]]}


def test_a_node_never_gets_one_port_twice() -> None:
    """``ray start`` refuses a port given to two components (it failed a CI run).

    The ports used to be drawn one after another, each socket closed before the next bind,
    and the kernel gave the same port back about once in 330 nodes.
    """
    for _ in range(2000):
        ports = node_ports(6380, head=True)
        assert len(set(ports)) == len(ports) == 7 and 6380 not in ports


def _cli(args: list[str], s3: S3Server) -> subprocess.CompletedProcess[str]:
    """``cdml-edge ARGS`` in a process of its own, the S3 endpoint in its environment."""
    code = "import sys; from cdml_edge.cli import app; sys.argv[0] = 'cdml-edge'; app()"
    env = node_env({"CDML_EDGE_S3_ENDPOINT": s3.url})
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


@pytest.fixture(scope="module")
def fleet(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two devices' rings uploaded under ``s3://cluster/line3/device=…/date=…``.

    Also every window in one plain folder, for the local engine.
    """
    base = tmp_path_factory.mktemp("cluster")
    model = brightness_classifier(base / "brightness.onnx")
    merged = base / "merged"
    merged.mkdir()
    for device, values in VALUES.items():
        ring = base / device
        source = "cam1" if device == "edge-1" else "cam2"
        scored_ring(ring, model, values, t0=T0[device], device=device, source=source)
        date = time.strftime("%Y-%m-%d", time.gmtime(T0[device]))
        for f in sorted(ring.iterdir()):
            if f.name != "catalog.sqlite":
                s3_server.put(BUCKET, f"line3/device={device}/date={date}/{f.name}", f.read_bytes())
                (merged / f.name).write_bytes(f.read_bytes())
    return {"merged": merged, "model": model}


def _joined_node_worked(cluster: RayNodes, actor: str) -> bool:
    """Whether a worker of the joined node (not the head) ran ``actor``."""
    logs = cluster.nodes[1].temp.glob("session_*/logs/worker-*.out")
    return any(actor in p.read_text(errors="replace") for p in logs)


def test_export_on_a_two_node_cluster_is_the_local_export(
    ray_nodes: RayNodes, s3_server: S3Server, fleet: dict[str, Path], tmp_path: Path
) -> None:
    local = tmp_path / "local.tar.zst"
    opts = ExportOptions(fleet["merged"], local, split="0.5/0.5")
    sel = parse_selection(opts)
    export_trainset(fleet["merged"], local, split=sel.split, describe=sel.describe(opts))
    out = tmp_path / "fleet.tar.zst"
    r = _cli(
        ["export", f"s3://{BUCKET}/line3", str(out), "--split", "0.5/0.5", "-q"]
        + ["--engine", "ray", "--ray-address", ray_nodes.address],
        s3_server,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exported 10 items from 4 windows" in r.stdout
    assert out.read_bytes() == local.read_bytes()


def test_replay_on_a_two_node_cluster_gives_the_local_lines(
    ray_nodes: RayNodes, s3_server: S3Server, fleet: dict[str, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    runners = load_runners({"image": (fleet["model"], ModelOverrides())}, warm_up=False)
    replay_to_jsonl(fleet["merged"], runners, tmp_path / "local.jsonl")
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(f"models:\n  image:\n    path: {fleet['model']}\n")
    out = tmp_path / "results.parquet"
    r = _cli(
        ["replay", f"s3://{BUCKET}/line3", "-c", str(cfg), "--out", str(out), "-q"]
        + ["--engine", "ray", "--ray-address", ray_nodes.address],
        s3_server,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replayed 4 windows, 10 results" in r.stdout
    rows = sorted(
        pq.read_table(out).to_pylist(),
        key=lambda row: (row["closed_at"], row["window_id"], row["position"]),
    )
    assert "".join(row["record"] + "\n" for row in rows) == (tmp_path / "local.jsonl").read_text()
    assert {row["device"] for row in rows} == {"edge-1", "edge-2"}
    assert _joined_node_worked(ray_nodes, "ReplayScorer")
