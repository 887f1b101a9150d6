"""Images/s into PyTorch: our ZIP and tar.zst vs class folders (ImageFolder way) vs WebDataset.

Every variant feeds ``DataLoader(num_workers=2, batch_size=64)`` with the same 224-px JPEGs
and the same decode + resize (``cdml_edge.decode.decode_image`` to 224×224, then float32
C×H×W). Reported per variant: time to the first batch (from building the dataset, workers
started fresh) and steady images/s over the rest of the epoch; best of ``--reps`` runs,
interleaved so background load hits every variant alike. Ratios are against (iii).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from cdml_edge import CDMLStreamDataset
from cdml_edge.archive import write_archive
from cdml_edge.data.samples import image_to_tensor
from cdml_edge.decode import decode_image

SIZE = 224
BATCH = 64
WORKERS = 2
CLASSES = ("bolt", "gear", "nut", "shaft")


def make_images(n: int, seed: int = 0) -> list[tuple[str, bytes]]:
    """``<class>/<i>.jpg``: smooth colour fields with noise, about 15-25 KB at quality 90."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    out = []
    for i in range(n):
        a, b, c = rng.uniform(0, 255, 3)
        img = np.stack([a * xx + (255 - a) * yy, b * yy, c * (1 - xx)], axis=-1)
        img += rng.normal(0, 12, img.shape)
        ok, buf = cv2.imencode(
            ".jpg", np.clip(img, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90]
        )
        assert ok
        out.append((f"{CLASSES[i % len(CLASSES)]}/{i:06d}.jpg", buf.tobytes()))
    return out


def decode(data: bytes) -> torch.Tensor:
    """The one decode + resize every variant uses."""
    return image_to_tensor(decode_image(data, target_size=SIZE))


class FolderDataset(Dataset[tuple[torch.Tensor, int]]):
    """ImageFolder's way: scan class folders, one ``open().read()`` per item."""

    def __init__(self, root: str) -> None:
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, y = self.samples[i]
        with open(path, "rb") as fh:
            return decode(fh.read()), y


def build(tmp: Path, items: list[tuple[str, bytes]], shards: int) -> dict[str, Any]:
    zip_path, tzst_path = tmp / "images.zip", tmp / "images.tar.zst"
    write_archive(zip_path, items)
    write_archive(tzst_path, items)
    root = tmp / "folders"
    for name, data in items:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    urls = []
    per = -(-len(items) // shards)
    for s in range(shards):
        url = tmp / f"shard-{s:04d}.tar"
        with tarfile.open(url, "w") as tar:
            for name, data in items[s * per : (s + 1) * per]:
                key = name.rsplit(".", 1)[0]
                label = str(CLASSES.index(name.split("/")[0])).encode()
                for ext, payload in (("jpg", data), ("cls", label)):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        urls.append(str(url))
    return {
        "zip": zip_path,
        "tar.zst": tzst_path,
        "folders": root,
        "wds": urls,
        "bytes": {"zip": zip_path.stat().st_size, "tar.zst": tzst_path.stat().st_size},
    }


def loaders(paths: dict[str, Any]) -> dict[str, Callable[[], DataLoader[Any]]]:
    def ours(path: Path) -> Callable[[], DataLoader[Any]]:
        def make() -> DataLoader[Any]:
            ds = CDMLStreamDataset(path, is_image=True, target_size=SIZE, labels="folder")
            g = torch.Generator().manual_seed(0)
            return DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, generator=g)

        return make

    def folders() -> DataLoader[Any]:
        g = torch.Generator().manual_seed(0)
        return DataLoader(
            FolderDataset(str(paths["folders"])),
            batch_size=BATCH,
            shuffle=True,
            num_workers=WORKERS,
            generator=g,
        )

    def wds() -> DataLoader[Any]:
        import webdataset

        ds = (
            webdataset.WebDataset(paths["wds"], shardshuffle=False, empty_check=False)
            .to_tuple("jpg", "cls")
            .map_tuple(decode, lambda b: int(b))
        )
        return DataLoader(ds, batch_size=BATCH, num_workers=WORKERS)

    return {
        "(i) ZIP (CDMLStreamDataset)": ours(paths["zip"]),
        "(ii) tar.zst (CDMLStreamDataset)": ours(paths["tar.zst"]),
        "(iii) class folders, file reads": folders,
        "(iv) WebDataset tar shards": wds,
    }


def run_once(make: Callable[[], DataLoader[Any]], n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    it = iter(make())
    x, y = next(it)
    t_first = time.perf_counter() - t0
    seen = 0
    t1 = time.perf_counter()
    for x, _ in it:
        seen += x.shape[0]
    rate = seen / (time.perf_counter() - t1)
    assert seen + BATCH == n, f"saw {seen + BATCH} of {n} images"
    return t_first, rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    n = args.images - args.images % BATCH
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
        items = make_images(n)
        paths = build(Path(tmp), items, shards=2 * WORKERS)
        makers = loaders(paths)
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in makers}
        for _ in range(args.reps):
            for name, make in makers.items():
                results[name].append(run_once(make, n))
    jpeg_kb = sum(len(d) for _, d in items) / n / 1024
    best = {k: (min(f for f, _ in v), max(r for _, r in v)) for k, v in results.items()}
    base_first, base_rate = best["(iii) class folders, file reads"]
    print(
        f"{n} JPEGs of {SIZE}x{SIZE} (mean {jpeg_kb:.1f} KB), DataLoader(num_workers={WORKERS}, "
        f"batch_size={BATCH}), best of {args.reps}; torch threads 1, {os.cpu_count()} CPUs"
    )
    print("| variant | images/s (best) | runs (min-max) | vs (iii) | first batch (s) | vs (iii) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (first, rate) in best.items():
        lo, hi = min(r for _, r in results[name]), max(r for _, r in results[name])
        print(
            f"| {name} | {rate:,.0f} | {lo:,.0f}-{hi:,.0f} | {rate / base_rate:.2f}x | "
            f"{first:.2f} | {first / base_first:.2f}x |"
        )
    print(
        f"archive sizes: ZIP {paths['bytes']['zip'] / 2**20:.1f} MiB, "
        f"tar.zst {paths['bytes']['tar.zst'] / 2**20:.1f} MiB; "
        f"total {time.perf_counter() - t_start:.0f} s"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {k: {"first_batch_s": f, "images_per_s": r} for k, (f, r) in best.items()}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
