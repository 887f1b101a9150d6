"""The models in ``models/`` run with onnxruntime alone — torch is blocked in the process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.paths import ROOT

from cdml_edge import synth
from cdml_edge.decode import decode_audio, decode_csv, decode_image
from cdml_edge.model.spec import load_onnx_model, prepare_batch, run_model

MODELS = ROOT / "models"
SHIPPED = ["digits.onnx", "audio_anomaly.onnx", "vibration_anomaly.onnx"]

CHECK = textwrap.dedent(
    """
    import json, sys

    class BlockTorch:  # any "import torch" raises, as on an appliance without PyTorch
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"{name} is blocked")
            return None

    sys.meta_path.insert(0, BlockTorch())
    try:
        import torch  # noqa: F401
        raise SystemExit("torch import was not blocked")
    except ImportError:
        pass
    import numpy as np
    from cdml_edge import synth
    from cdml_edge.decode import decode_audio, decode_csv, decode_image
    from cdml_edge.model.spec import load_onnx_model, prepare_batch, run_model

    models = sys.argv[1]
    out = {}
    session, spec = load_onnx_model(f"{models}/digits.onnx")
    frames, labels = synth.digit_images(n=200, seed=12345)  # fresh renders
    decoded = [decode_image(synth.encode_png(f)) for f in frames]
    logits = run_model(session, spec, prepare_batch(spec, decoded))["logits"]
    pred = np.array([int(spec.labels[i]) for i in logits.argmax(1)])
    out["digits"] = {"acc": float((pred == labels).mean()), "shape": list(logits.shape),
                     "input": spec.input.shape(), "modality": spec.modality}

    def anomaly(name, normal, fault, decode):
        session, spec = load_onnx_model(f"{models}/{name}.onnx")
        s_n = run_model(session, spec, prepare_batch(spec, [decode(b) for b in normal]))
        s_f = run_model(session, spec, prepare_batch(spec, [decode(b) for b in fault]))
        flags_n = spec.is_anomalous(s_n["anomaly"])
        flags_f = spec.is_anomalous(s_f["anomaly"])
        return {"fpr": float(flags_n.mean()), "tpr": float(flags_f.mean()),
                "modality": spec.modality, "outputs": spec.outputs}

    audio_kw = load_onnx_model(f"{models}/audio_anomaly.onnx")[1].input.decode_kwargs()
    def mfcc(b):
        return decode_audio(b, mode="mfcc", **audio_kw)
    out["audio"] = anomaly("audio_anomaly", synth.machine_audio(40, 777),
                           synth.machine_audio(40, 777, True), mfcc)
    out["vibration"] = anomaly("vibration_anomaly", synth.vibration_csv(40, 777),
                               synth.vibration_csv(40, 777, True),
                               lambda b: decode_csv(b).values)
    out["torch_loaded"] = "torch" in sys.modules
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_is_small(name: str) -> None:
    path = MODELS / name
    assert path.is_file(), f"{path} missing: run scripts/demo/train_demo_models.py"
    assert path.stat().st_size <= 2 * 1024 * 1024


@pytest.mark.slow
def test_shipped_models_run_without_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, str(MODELS)], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["torch_loaded"] is False
    assert res["digits"]["input"] == [3, 32, 32] and res["digits"]["shape"] == [200, 10]
    assert res["digits"]["acc"] >= 0.9  # glyphs include training ones (docs/models.md: held-out)
    for key in ("audio", "vibration"):
        assert res[key]["outputs"] == ["anomaly", "latent"]
        assert res[key]["fpr"] <= 0.15, res
        assert res[key]["tpr"] >= 0.8, res


def test_metrics_file_matches_the_shipped_models() -> None:
    metrics = json.loads((MODELS / "metrics.json").read_text())
    assert metrics["digits"]["heldout_accuracy"] >= 0.95
    for key, name in (
        ("digits", "digits.onnx"),
        ("audio_anomaly", "audio_anomaly.onnx"),
        ("vibration_anomaly", "vibration_anomaly.onnx"),
    ):
        assert metrics[key]["size_bytes"] == (MODELS / name).stat().st_size
        assert metrics[key]["parity_max_abs_diff"] <= 1e-4


def _onnx_scores(path: Path, decoded: list[Any], output: str) -> np.ndarray:
    session, spec = load_onnx_model(path)
    batches = [decoded[i : i + 64] for i in range(0, len(decoded), 64)]
    return np.concatenate(
        [run_model(session, spec, prepare_batch(spec, b))[output] for b in batches]
    )


def test_digits_heldout_accuracy_rescored_in_onnxruntime() -> None:
    """The held-out split rebuilt from the seed (as the training script builds it), scored."""
    metrics = json.loads((MODELS / "metrics.json").read_text())
    train_idx, test_idx, frames, labels = synth.digits_heldout(metrics["seed"])
    assert not set(train_idx.tolist()) & set(test_idx.tolist())  # no glyph in both
    assert len(labels) == metrics["digits"]["test_items"]
    session, spec = load_onnx_model(MODELS / "digits.onnx")
    assert spec.labels is not None
    decoded = [decode_image(synth.encode_png(f)) for f in frames]
    logits = _onnx_scores(MODELS / "digits.onnx", decoded, "logits")
    acc = float((np.array([int(spec.labels[i]) for i in logits.argmax(1)]) == labels).mean())
    assert acc >= 0.95
    assert acc == pytest.approx(metrics["digits"]["heldout_accuracy"], abs=1.5 / len(labels))


@pytest.mark.parametrize(
    ("name", "make", "decode"),
    [
        ("vibration_anomaly", synth.vibration_csv, lambda b: decode_csv(b).values),
        ("audio_anomaly", synth.machine_audio, lambda b: decode_audio(b, mode="mfcc")),
    ],
)
def test_anomaly_heldout_auroc_rescored_in_onnxruntime(
    name: str, make: Callable[[int, int, bool], list[bytes]], decode: Callable[[bytes], Any]
) -> None:
    metrics = json.loads((MODELS / "metrics.json").read_text())
    normal, fault = synth.anomaly_heldout(make, metrics["seed"])
    assert 2 * len(normal) == metrics[name]["test_items"]
    s_n = _onnx_scores(MODELS / f"{name}.onnx", [decode(b) for b in normal], "anomaly")
    s_f = _onnx_scores(MODELS / f"{name}.onnx", [decode(b) for b in fault], "anomaly")
    # AUROC = P(fault score > normal score), ties half (Mann-Whitney U)
    diff = s_f[:, None] - s_n[None, :]
    auc = float((diff > 0).mean() + 0.5 * (diff == 0).mean())
    assert auc >= 0.95
    assert auc == pytest.approx(metrics[name]["auroc"], abs=2e-3)


def test_digits_reads_printed_digits_on_either_ground() -> None:
    """It was confidently wrong on printed digits (3/10 dark on light, 0/2 light on dark)."""
    metrics = json.loads((MODELS / "metrics.json").read_text())["digits"]
    frames, labels, inverted = synth.printed_digits_test()
    session, spec = load_onnx_model(MODELS / "digits.onnx")
    assert spec.labels is not None
    decoded = [decode_image(synth.encode_png(f)) for f in frames]
    logits = _onnx_scores(MODELS / "digits.onnx", decoded, "logits")
    right = np.array([int(spec.labels[i]) for i in logits.argmax(1)]) == labels
    assert right[~inverted].mean() >= 0.9 and right[inverted].mean() >= 0.9, (
        right[~inverted].mean(),
        right[inverted].mean(),
    )
    assert right.mean() == pytest.approx(metrics["printed_accuracy"], abs=1.5 / len(labels))
