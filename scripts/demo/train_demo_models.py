#!/usr/bin/env python3
"""Reproduce the demo models in ``models/`` from a seed.

* ``digits.onnx`` — image classifier (CDMLTrainTier2, 32×32 RGB) trained on
  scikit-learn's bundled handwritten digits and on printed digits (every Hershey face,
  upright and italic, strokes 1-4 px) rendered as camera-like frames (paper and ink colours,
  shift, rotation, blur, noise), a third of each light ink on a dark ground, packed into a
  ZIP of class folders and read through CDMLStreamDataset. Held-out glyphs (never seen in
  training, rendered afresh) and the printed-digit test set
  (:func:`cdml_edge.synth.printed_digits_test`, half of it inverted) give the accuracies.
* ``audio_anomaly.onnx`` — AudioEncoder on MFCCs of generated motor audio (normal hum
  against bearing-fault impulses); anomaly = distance to the normal prototype.
* ``vibration_anomaly.onnx`` — TimeSeriesEncoder on 3-axis accelerometer CSV windows.

Held-out figures are measured with the exported ONNX files in onnxruntime, on inputs
prepared by ``cdml_edge.model.spec.prepare_batch`` — the path the appliance runs.
Writes ``models/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cdml_edge import synth
from cdml_edge.archive import pack
from cdml_edge.decode import decode_audio, decode_csv, decode_image
from cdml_edge.model.spec import load_onnx_model, prepare_batch, run_model
from cdml_edge.nn.cda import auroc
from cdml_edge.nn.onnx_export import export_checkpoint
from cdml_edge.nn.recipes import train_from_archive

ROOT = Path(__file__).resolve().parents[2]


def digits_archives(seed: int, renders: int) -> tuple[bytes, bytes, list[bytes], np.ndarray]:
    """Train ZIP (each training glyph rendered ``renders`` times), test ZIP, test PNGs."""
    _, labels, source = synth.load_digit_glyphs(seed)
    if source != "sklearn-digits":
        raise SystemExit("scikit-learn is needed to train the digits model (train extra)")
    tr, te, test_imgs, test_y = synth.digits_heldout(seed)
    train_items = []
    for r in range(renders):
        imgs, ys = synth.digit_images(seed=seed * 100 + r, indices=tr)
        train_items += [
            (f"{y}/{r}-{i:05d}.png", synth.encode_png(_inverted(im) if i % 3 == r % 3 else im))
            for i, (im, y) in zip(tr, zip(imgs, ys, strict=True), strict=True)
        ]
    train_items += printed_items(seed, PRINTED_TRAIN)
    test_png = [synth.encode_png(im) for im in test_imgs]
    test_items = [(f"{y}/{i:05d}.png", b) for i, y, b in zip(te, test_y, test_png, strict=True)]
    return pack(train_items), pack(test_items), test_png, test_y


PRINTED_TRAIN = 3000  # printed digits in the training set


def _inverted(frame: np.ndarray) -> np.ndarray:
    """Light ink on a dark ground: the frame's colours turned over."""
    return np.asarray(255 - frame, dtype=np.uint8)


def printed_items(seed: int, n: int) -> list[tuple[str, bytes]]:
    """``n`` printed digits rendered as frames, every third one inverted (class folders)."""
    glyphs, labels = synth.printed_digit_glyphs(n, seed + 7)
    rng = np.random.default_rng(seed + 8)
    return [
        (f"{y}/p-{i:05d}.png", synth.encode_png(synth.render_digit(g, rng, 64, i % 3 == 0)))
        for i, (g, y) in enumerate(zip(glyphs, labels, strict=True))
    ]


def printed_accuracy(path: Path) -> dict[str, Any]:
    """Accuracy of the ONNX digits model on the printed-digit test set, by ground."""
    frames, labels, inverted = synth.printed_digits_test()
    decoded = [decode_image(synth.encode_png(f)) for f in frames]
    session, spec = load_onnx_model(path)
    assert spec.labels is not None
    logits = onnx_scores(path, decoded, "logits")
    right = np.array([int(spec.labels[i]) for i in logits.argmax(1)]) == labels
    return {
        "printed_accuracy": float(right.mean()),
        "printed_dark_on_light_accuracy": float(right[~inverted].mean()),
        "printed_light_on_dark_accuracy": float(right[inverted].mean()),
        "printed_test_items": len(labels),
    }


def class_zip(normal: list[bytes], fault: list[bytes], ext: str) -> bytes:
    items = [(f"normal/{i:05d}.{ext}", b) for i, b in enumerate(normal)]
    items += [(f"fault/{i:05d}.{ext}", b) for i, b in enumerate(fault)]
    return pack(items)


def onnx_scores(path: Path, decoded: list[np.ndarray], output: str) -> np.ndarray:
    session, spec = load_onnx_model(path)
    out = [
        run_model(session, spec, prepare_batch(spec, decoded[i : i + 64]))[output]
        for i in range(0, len(decoded), 64)
    ]
    return np.concatenate(out)


def train_anomaly(
    name: str,
    modality: str,
    ext: str,
    make: Callable[[int, int, bool], list[bytes]],
    decode: Callable[[bytes], np.ndarray],
    n_train: int,
    n_test: int,
    epochs: int,
    seed: int,
    work: Path,
    out: Path,
) -> dict[str, Any]:
    data = class_zip(make(n_train, seed, False), make(n_train // 2, seed, True), ext)
    t0 = time.perf_counter()
    res = train_from_archive(
        data,
        modality,
        epochs,
        work / name,
        name=name,
        batch_size=32,
        lr=2e-3,
        normal_label="normal",
        seed=seed,
    )
    train_s = time.perf_counter() - t0
    report = export_checkpoint(res.checkpoint, out / f"{name}.onnx")
    normal_b, fault_b = synth.anomaly_heldout(make, seed, n_test)  # fresh, unseen clips
    normal = [decode(b) for b in normal_b]
    fault = [decode(b) for b in fault_b]
    s_n = onnx_scores(report.path, normal, "anomaly")
    s_f = onnx_scores(report.path, fault, "anomaly")
    thr = float(res.spec.anomaly_threshold or 0.0)
    return {
        "file": report.path.name,
        "task": "anomaly",
        "modality": modality,
        "params": res.trainer.model.num_parameters(),
        "size_bytes": report.size_bytes,
        "parity_max_abs_diff": report.max_abs_diff,
        "auroc": auroc(s_n, s_f),
        "threshold": thr,
        "false_positive_rate": float((s_n > thr).mean()),
        "detection_rate": float((s_f > thr).mean()),
        "test_items": 2 * n_test,
        "epochs": epochs,
        "train_seconds": round(train_s, 1),
    }


def train_digits(epochs: int, renders: int, seed: int, work: Path, out: Path) -> dict[str, Any]:
    train_zip, test_zip, test_png, test_y = digits_archives(seed, renders)
    t0 = time.perf_counter()
    res = train_from_archive(
        train_zip,
        "image",
        epochs,
        work / "digits",
        val_data=test_zip,
        name="digits",
        image_size=32,
        channels=3,
        batch_size=64,
        lr=2e-3,
        recon_weight=0.5,
        seed=seed,
        in_memory=False,
    )
    train_s = time.perf_counter() - t0
    report = export_checkpoint(res.checkpoint, out / "digits.onnx")
    decoded = [decode_image(b) for b in test_png]
    logits = onnx_scores(report.path, decoded, "logits")
    pred = np.array([int(res.classes[i]) for i in logits.argmax(1)])
    return {
        "file": report.path.name,
        "task": "classifier",
        "modality": "image",
        "params": res.trainer.model.num_parameters(),
        "size_bytes": report.size_bytes,
        "parity_max_abs_diff": report.max_abs_diff,
        "heldout_accuracy": float((pred == test_y).mean()),
        "test_items": len(test_y),
        "train_items": renders * (1797 - len(test_y)) + PRINTED_TRAIN,
        **printed_accuracy(report.path),
        "torch_val_accuracy": res.history[-1].get("val_acc"),
        "epochs": epochs,
        "train_seconds": round(train_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "models")
    ap.add_argument("--digits-epochs", type=int, default=8)
    ap.add_argument("--digits-renders", type=int, default=2)
    ap.add_argument("--anomaly-epochs", type=int, default=6)
    ap.add_argument("--only", choices=["digits", "audio", "vibration"], action="append")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only or ["digits", "audio", "vibration"])
    metrics_path = args.out / "metrics.json"
    metrics: dict[str, Any] = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    with tempfile.TemporaryDirectory(prefix="cdml-train-") as tmp:
        work = Path(tmp)
        if "digits" in wanted:
            metrics["digits"] = train_digits(
                args.digits_epochs, args.digits_renders, args.seed, work, args.out
            )
            print(json.dumps({"digits": metrics["digits"]}))
        if "audio" in wanted:

            def wav(b: bytes) -> np.ndarray:
                return decode_audio(b, mode="mfcc")

            metrics["audio_anomaly"] = train_anomaly(
                "audio_anomaly",
                "audio",
                "wav",
                lambda n, s, f: synth.machine_audio(n, s, f),
                wav,
                400,
                synth.ANOMALY_HELDOUT_ITEMS,
                args.anomaly_epochs,
                args.seed,
                work,
                args.out,
            )
            print(json.dumps({"audio_anomaly": metrics["audio_anomaly"]}))
        if "vibration" in wanted:

            def table(b: bytes) -> np.ndarray:
                return decode_csv(b).values

            metrics["vibration_anomaly"] = train_anomaly(
                "vibration_anomaly",
                "csv",
                "csv",
                lambda n, s, f: synth.vibration_csv(n, s, f),
                table,
                400,
                synth.ANOMALY_HELDOUT_ITEMS,
                args.anomaly_epochs,
                args.seed,
                work,
                args.out,
            )
            print(json.dumps({"vibration_anomaly": metrics["vibration_anomaly"]}))
    metrics["seed"] = args.seed
    metrics_path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    print(f"wrote {metrics_path}")


if __name__ == "__main__":
    main()
