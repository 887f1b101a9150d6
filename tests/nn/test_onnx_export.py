"""ONNX export: dynamic batch, metadata, parity with torch, the CLI verbs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cdml_edge import synth
from cdml_edge.archive import pack
from cdml_edge.cli import app
from cdml_edge.model.spec import (
    INPUT_NAME,
    ImageInput,
    ModelSpec,
    SeriesInput,
    load_onnx_model,
    prepare_batch,
    run_model,
)


def digits_spec() -> ModelSpec:
    return ModelSpec(
        name="digits",
        version="2.1.0",
        modality="image",
        task="classifier",
        input=ImageInput(size=32),
        labels=[str(i) for i in range(10)],
    )


def test_classifier_export_dynamic_batch_metadata_and_parity(tmp_path: Path) -> None:
    import onnx
    import torch

    from cdml_edge.nn import CDMLTrainTier2
    from cdml_edge.nn.onnx_export import OPSET, export_onnx

    torch.manual_seed(0)
    model = CDMLTrainTier2(image_size=32).eval()
    spec = digits_spec()
    report = export_onnx(model, spec, tmp_path / "d.onnx")
    assert report.max_abs_diff <= 1e-4 and report.outputs == ["logits", "latent"]
    proto = onnx.load(str(report.path))
    assert proto.opset_import[0].version == OPSET
    meta = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(meta["cdml.labels"]) == spec.labels and meta["cdml.version"] == "2.1.0"
    session, loaded = load_onnx_model(report.path)
    assert loaded == spec
    assert session.get_inputs()[0].name == INPUT_NAME
    assert not isinstance(session.get_inputs()[0].shape[0], int)  # symbolic batch dimension
    # parity holds for any input; random frames skip loading and rendering the digit glyphs
    frames = np.random.default_rng(1).integers(0, 256, (9, 64, 64, 3), dtype=np.uint8)
    for n in (1, 4, 9):
        x = prepare_batch(loaded, list(frames[:n]))
        got = run_model(session, loaded, x)
        with torch.no_grad():
            z = model.compress(torch.from_numpy(x))
            logits = model.classifier(z)
        assert got["logits"].shape == (n, 10) and got["latent"].shape == (n, 64)
        assert np.abs(got["logits"] - logits.numpy()).max() <= 1e-4
        assert np.abs(got["latent"] - z.numpy()).max() <= 1e-4


def test_anomaly_export_carries_scorer_and_threshold(tmp_path: Path) -> None:
    import torch

    from cdml_edge.nn import AnomalyScorer, TimeSeriesEncoder
    from cdml_edge.nn.onnx_export import OnnxExportError, export_onnx

    torch.manual_seed(0)
    model = TimeSeriesEncoder(channels=3, window=64, latent_dim=8).eval()
    x = torch.randn(40, 3, 64)
    with torch.no_grad():
        scorer = AnomalyScorer.fit(model.compress(x))
    spec = ModelSpec(
        name="vib",
        modality="timeseries",
        task="anomaly",
        input=SeriesInput(channels=3, window=64),
        anomaly_threshold=scorer.threshold,
    )
    report = export_onnx(model, spec, tmp_path / "v.onnx", scorer=scorer)
    session, loaded = load_onnx_model(report.path)
    assert loaded.outputs == ["anomaly", "latent"]
    assert loaded.anomaly_threshold == pytest.approx(scorer.threshold)
    got = run_model(session, loaded, x[:7].numpy())
    with torch.no_grad():
        want = scorer.score(model.compress(x[:7])).numpy()
    assert got["anomaly"].shape == (7,)
    assert np.abs(got["anomaly"] - want).max() <= 1e-4
    with pytest.raises(OnnxExportError, match="AnomalyScorer"):
        export_onnx(model, spec, tmp_path / "w.onnx")


def test_parity_failure_leaves_no_file(tmp_path: Path) -> None:
    from cdml_edge.nn import CDMLTrainTier2
    from cdml_edge.nn.onnx_export import OnnxExportError, export_onnx

    model = CDMLTrainTier2(image_size=32).eval()
    target = tmp_path / "bad.onnx"
    with pytest.raises(OnnxExportError, match="differs from torch"):
        export_onnx(model, digits_spec(), target, tolerance=-1.0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_train_then_export(tmp_path: Path) -> None:
    frames, labels = synth.digit_images(n=120, seed=2)
    archive = tmp_path / "digits.zip"
    archive.write_bytes(
        pack(
            [
                (f"{y}/{i:04d}.png", synth.encode_png(im))
                for i, (im, y) in enumerate(zip(frames, labels, strict=True))
            ]
        )
    )
    runner = CliRunner()
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(archive),
            "--modality",
            "image",
            "--epochs",
            "2",
            "--out",
            str(out),
            "--name",
            "cli-digits",
        ],
    )
    assert res.exit_code == 0, res.output
    final = json.loads(res.output.strip().splitlines()[-1])
    assert final["epoch"] == 2 and 0.0 <= final["val_acc"] <= 1.0
    ckpt = Path(final["checkpoint"])
    assert ckpt.parent == out / "checkpoints" and ckpt.is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    onnx_path = tmp_path / "cli.onnx"
    res = runner.invoke(app, ["export-onnx", str(ckpt), str(onnx_path)])
    assert res.exit_code == 0, res.output
    assert "parity max abs diff" in res.output
    _, spec = load_onnx_model(onnx_path)
    assert spec.name == "cli-digits" and spec.labels == [str(i) for i in range(10)]
    res = runner.invoke(app, ["export-onnx", str(tmp_path / "missing.pt"), str(onnx_path)])
    assert res.exit_code == 2 and "checkpoint not found" in res.output


@pytest.mark.slow
def test_cli_trains_an_anomaly_model_from_csv(tmp_path: Path) -> None:
    items = [(f"normal/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(60, seed=3))]
    items += [(f"fault/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(30, 3, True))]
    archive = tmp_path / "vib.zip"
    archive.write_bytes(pack(items))
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(archive),
            "--modality",
            "csv",
            "--epochs",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--anomaly-normal",
            "normal",
            "--batch-size",
            "16",
        ],
    )
    assert res.exit_code == 0, res.output
    final = json.loads(res.output.strip().splitlines()[-1])
    assert final["anomaly_threshold"] > 0
    onnx_path = tmp_path / "vib.onnx"
    res = runner.invoke(app, ["export-onnx", final["checkpoint"], str(onnx_path)])
    assert res.exit_code == 0, res.output
    session, spec = load_onnx_model(onnx_path)
    assert spec.task == "anomaly" and spec.input.shape() == [3, 256]
    assert spec.anomaly_threshold == pytest.approx(final["anomaly_threshold"])
    res = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(archive),
            "--modality",
            "csv",
            "--epochs",
            "1",
            "--out",
            str(tmp_path / "r2"),
            "--anomaly-normal",
            "nope",
        ],
    )
    assert res.exit_code == 2 and "nope" in res.output
