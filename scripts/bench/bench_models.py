#!/usr/bin/env python3
"""Per-item latency of the image model: onnxruntime against torch eager, batch 1 / 8 / 32.

Both run the same graph (CDMLTrainTier2 encoder + classifier, 32×32 RGB, as exported
for ``models/digits.onnx``) on the same inputs, with the same thread count, in one run.
Prints a table and the ORT speed-up per batch size (target: ≥ 3× at batch 1).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from timing import median_time, ratio

from cdml_edge.model.spec import ImageInput, ModelSpec
from cdml_edge.nn import CDMLTrainTier2
from cdml_edge.nn.onnx_export import _ClassifierGraph, export_onnx


def per_item_us(fn: Callable[[], object], batch: int, seconds: float) -> float:
    """Microseconds per item: the median call over ``seconds`` (10 calls of warm-up)."""
    return median_time(fn, seconds, warmup=10, min_runs=20) / batch * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="Time per measurement.")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = CDMLTrainTier2(latent_dim=64, num_classes=10, in_channels=3, image_size=32).eval()
    graph = _ClassifierGraph(model).eval()
    spec = ModelSpec(
        name="bench",
        modality="image",
        task="classifier",
        input=ImageInput(size=32),
        labels=[str(i) for i in range(10)],
    )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        report = export_onnx(model, spec, Path(tmp) / "bench.onnx")
        session = ort.InferenceSession(str(report.path), opts, providers=["CPUExecutionProvider"])
    assert model.head is not None
    used = sum(p.numel() for m in (model.encoder, model.head) for p in m.parameters())
    print(
        f"model: CDMLTrainTier2 encoder+classifier, 3x32x32, "
        f"{used:,} params in the graph, "
        f"parity {report.max_abs_diff:.2g}, threads {args.threads}"
    )
    rows = []
    for batch in (1, 8, 32):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        xt = torch.from_numpy(x)

        def run_torch(xt: torch.Tensor = xt) -> object:
            with torch.inference_mode():
                return graph(xt)

        def run_ort(x: np.ndarray = x) -> object:
            return session.run(None, {"input": x})

        t_torch = per_item_us(run_torch, batch, args.seconds)
        t_ort = per_item_us(run_ort, batch, args.seconds)
        rows.append((batch, t_torch, t_ort))
    print(f"{'batch':>5}  {'torch eager us/item':>20}  {'onnxruntime us/item':>20}  speed-up")
    for batch, t_torch, t_ort in rows:
        print(f"{batch:>5}  {t_torch:>20.1f}  {t_ort:>20.1f}  {ratio(t_torch, t_ort):>8}")
    speedup = rows[0][1] / rows[0][2]
    verdict = "meets" if speedup >= 3.0 else "misses"
    print(f"batch 1: onnxruntime {speedup:.2f}x torch eager ({verdict} the 3x target)")


if __name__ == "__main__":
    main()
