"""The retraining loop end to end, from the agent to a replay with the new model.

Agent -> retention -> export -> dataset -> one epoch of training -> ONNX export -> replay of the
retained windows with the new model.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, wait_for, write_atomic
from helpers.models import brightness_classifier
from typer.testing import CliRunner

from cdml_edge.agent.app import Agent
from cdml_edge.archive import open_archive
from cdml_edge.cli import app
from cdml_edge.config import load_config
from cdml_edge.store.sidecar import list_retained

N_FRAMES = 48


@pytest.mark.slow
def test_retraining_loop(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from cdml_edge.data.dataset import CDMLStreamDataset
    from cdml_edge.nn.data import SpecTransform
    from cdml_edge.nn.recipes import base_spec, build_for
    from cdml_edge.nn.train import CDMLTrainer

    brightness_classifier(tmp_path / "brightness.onnx")
    cfg_path = tmp_path / "factory.yaml"
    cfg_path.write_text(
        textwrap.dedent("""
        device: {id: line3-cam, site: line-3}
        sources:
          - name: cam1
            kind: folder
            path: in/cam1
            modality: image
            window: {seconds: 200ms, max_items: 8}
            on_done: delete
            stable_seconds: 0.1
        models:
          image: {path: brightness.onnx}
        retention: {dir: ring, max_bytes: 64MiB, keep: all}
        output: {jsonl: live.jsonl}
        health: {interval: 1s}
    """)
    )
    cam = tmp_path / "in/cam1"
    cam.mkdir(parents=True)

    # 1. the agent scores frames from the line and keeps every window
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for i in range(N_FRAMES):
            value = 8 + (i * 97) % 240  # dark and bright frames, interleaved
            write_atomic(cam / f"frame_{i:03d}_{value}.jpg", jpeg(value))
        wait_for(
            lambda: sum(r.n_items for r in list_retained(tmp_path / "ring")) == N_FRAMES,
            timeout=60,
            what="all frames retained",
        )
        wait_for(lambda: not any(cam.iterdir()), timeout=30, what="source files released")
    finally:
        agent.stop()
    retained = list_retained(tmp_path / "ring")
    assert retained and all(r.model == "brightness" for r in retained)

    cli = CliRunner()
    # 2. export a training archive with a train/val split
    train_zip = tmp_path / "train.zip"
    r = cli.invoke(
        app, ["export", str(tmp_path / "ring"), str(train_zip), "--split", "0.8/0.2", "-q"]
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])  # warnings go to stderr
    assert summary["classes"] == {"bright": 24, "dark": 24}
    with open_archive(train_zip) as arc:
        provenance = json.loads(arc.read("manifest.json"))
    assert len(provenance["items"]) == N_FRAMES
    assert {p["window_id"] for p in provenance["items"]} == {r.window_id for r in retained}
    assert {p["device"] for p in provenance["items"]} == {"line3-cam"}

    # 3. CDMLStreamDataset over the export; 4. one epoch of CDMLTrainer.fit
    torch.manual_seed(0)
    spec = base_spec("image", "brightness-retrained", None, image_size=32)
    probe = CDMLStreamDataset(train_zip, modality="image", labels="folder", include="train/*")
    spec = spec.model_copy(update={"labels": probe.classes, "version": "2.0.0"})
    tf = SpecTransform(spec)
    train_ds = CDMLStreamDataset(
        train_zip, modality="image", labels="folder", include="train/*", transform=tf
    )
    # item ids carry the frames' mtimes, so which class the small val split lacks (if any)
    # differs per run: classes= numbers it as train/ does either way
    val_ds = CDMLStreamDataset(
        train_zip,
        modality="image",
        labels="folder",
        include="val/*",
        classes=train_ds.classes,
        transform=tf,
    )
    assert train_ds.classes == val_ds.classes == ["bright", "dark"]
    assert len(train_ds) + len(val_ds) == N_FRAMES
    trainer = CDMLTrainer(
        build_for(spec, 2), lr=2e-3, device="cpu", out_dir=tmp_path / "run", spec=spec
    )
    history = trainer.fit(
        DataLoader(train_ds, batch_size=16, shuffle=True),
        DataLoader(val_ds, batch_size=64),
        epochs=1,
    )
    assert len(history) == 1
    ckpt = trainer.last_checkpoint or trainer.save_checkpoint()

    # 5. export-onnx
    new_model = tmp_path / "brightness-v2.onnx"
    r = cli.invoke(app, ["export-onnx", str(ckpt), str(new_model)])
    assert r.exit_code == 0, r.output
    assert new_model.stat().st_size > 0

    # 6. replay the retained windows with the new model, twice: byte-identical results
    outs = [tmp_path / "replay-1.jsonl", tmp_path / "replay-2.jsonl"]
    for out in outs:
        r = cli.invoke(
            app,
            [
                "replay",
                "--config",
                str(cfg_path),
                "--model",
                str(new_model),
                "--out",
                str(out),
                "-q",
            ],
        )
        assert r.exit_code == 0, r.output
        assert f"{N_FRAMES} results" in r.output
    assert outs[0].read_bytes() == outs[1].read_bytes()
    recs = [json.loads(line) for line in outs[0].read_text().splitlines()]
    assert len(recs) == N_FRAMES
    assert {(x["model"], x["model_version"]) for x in recs} == {("brightness-retrained", "2.0.0")}
    assert all(x["was"]["model"] == "brightness" for x in recs)
    assert {x["label"] for x in recs} <= {"bright", "dark"}
    assert {x["id"] for x in recs} == {p["id"] for p in provenance["items"]}
    ordered = [(x["window_id"]) for x in recs]
    assert ordered == [w.window_id for w in retained for _ in range(w.n_items)]
