"""Show GPULoader overlapping host-to-device copies with compute on a CUDA machine.

Measures, on synthetic batches: copy alone, compute alone, both in series (plain
``.to(device)`` then compute), and both through ``GPULoader``. Overlap is the share of
the shorter phase hidden by the loader: ``(serial - overlapped) / min(copy, compute)``.
Exits 0 with a message when CUDA is unavailable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from timing import timed

from cdml_edge.data.gpu import GPULoader


def _timed(fn: Callable[[], object]) -> float:
    """Wall seconds of ``fn`` with the work it queued on the GPU."""
    return timed(fn, sync=torch.cuda.synchronize).wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-mb", type=float, default=64.0, help="host bytes per batch")
    ap.add_argument("--matmuls", type=int, default=0, help="compute per batch (0: auto)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(
            "CUDA is not available on this machine: nothing to check (GPULoader passes "
            "batches through unchanged here)."
        )
        return 0
    dev = torch.device("cuda")
    n = int(args.batch_mb * 2**20 / 4)
    host = [torch.randn(n).pin_memory() for _ in range(2)]
    batches = [host[i % 2] for i in range(args.batches)]
    w = torch.randn(2048, 2048, device=dev)

    def compute(k: int) -> None:
        x = w
        for _ in range(k):
            x = torch.tanh(x @ w)

    def compute_once() -> None:
        compute(1)

    # size compute to roughly the copy time of one batch, so overlap is visible
    copy_one = _timed(lambda: batches[0].to(dev, non_blocking=True))
    copy_one = _timed(lambda: batches[0].to(dev, non_blocking=True))
    k = args.matmuls
    if k <= 0:
        one = _timed(compute_once)
        k = max(1, round(copy_one / max(one, 1e-6)))

    def compute_each() -> None:
        for _ in batches:
            compute(k)

    t_copy = _timed(lambda: [b.to(dev, non_blocking=True) for b in batches])
    t_compute = _timed(compute_each)

    def serial() -> None:
        for b in batches:
            b.to(dev)
            compute(k)

    def overlapped() -> None:
        for b in GPULoader(batches, dev, prefetch=1):
            assert b.is_cuda
            compute(k)

    overlapped()  # warm-up
    t_serial = _timed(serial)
    t_over = _timed(overlapped)
    hidden = (t_serial - t_over) / max(min(t_copy, t_compute), 1e-9)
    print(
        f"device: {torch.cuda.get_device_name(dev)}  batches: {args.batches} x "
        f"{args.batch_mb:g} MB  compute: {k} matmul(s)/batch"
    )
    print(f"copy only      {t_copy * 1e3:8.1f} ms")
    print(f"compute only   {t_compute * 1e3:8.1f} ms")
    print(f"serial         {t_serial * 1e3:8.1f} ms")
    print(f"GPULoader      {t_over * 1e3:8.1f} ms")
    print(
        f"overlap        {hidden:8.0%} of the shorter phase hidden "
        f"(speed-up {t_serial / t_over:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
