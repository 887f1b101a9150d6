"""Images/s into PyTorch at 224, 128 and 64 px targets: our ZIP and tar.zst against baselines.

The baselines: class folders (ImageFolder's way), stdlib ``zipfile`` and WebDataset, all in
one run.

Every variant feeds ``DataLoader(num_workers=2, batch_size=64)`` with the same 224-px JPEGs
and yields float32 C×H×W at the target. ``CDMLStreamDataset`` decodes with
``cdml_edge.decode.decode_image`` (libjpeg-turbo at a reduced scale, area shrink in C); the
baselines decode with OpenCV as this project did before it (``cv2.imdecode``, at 1/2, 1/4 or
1/8 when that still covers the target, then ``INTER_AREA``). (vi) is the class folders with
our decoder, separating the decoder's gain from the reader's. (vii) and (viii) are our ZIP
with batches decoded into one buffer and taken by ``collate_fn=collate`` (float32, and uint8
to be normalised on the device); (ix) and (x) are a tar.zst written by stock
``tar --zstd`` (one zstd frame), read through its seekable copy, as (i) and as (viii);
(xi)-(xiii) are (vii), (viii) and (x) with ``reuse_batch_buffers=3`` (each worker reuses a
ring of 3 shared batch tensors instead of fresh shared memory per batch). (xiv) is the class
folders read as torchvision's ``ImageFolder`` with ``Resize`` and ``ToTensor`` does it (PIL:
full-size decode, bilinear resize), what a training script written without this project
does; the targets are judged against (iii), the faster folder reader. The
ceiling is the same JPEG bytes decoded and resized by ``decode_image`` from memory in as many
processes, without archive or DataLoader.
Steady images/s over an epoch from fresh workers, best of ``--reps`` runs, interleaved so
background load hits every variant alike; ratios are against (iii) and against the ceiling
at the same target. The stock archive's first epoch, its conversion included, is timed
apart against the folder's first epoch (dataset built, then every batch) and against the
same on a folder extracted from the stock archive first (``tar --zstd -xf`` timed too),
what a user holding such an archive does without us.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import cv2
import numpy as np
import torch
from timing import load_average, ratio, rounds
from torch.utils.data import DataLoader, Dataset

from cdml_edge import CDMLStreamDataset
from cdml_edge.archive import write_archive
from cdml_edge.data import collate
from cdml_edge.data.samples import image_to_tensor
from cdml_edge.decode import decode_image
from cdml_edge.decode import jpeg as jpeg_backend
from cdml_edge.decode.area import area_backend

SIZE = 224
CEILING = "(c) decode ceiling: bytes in memory, same processes"
FOLDER = "(iii) class folders, file reads"
STOCK = "(ix) stock tar --zstd archive, float32"
STOCK_U8 = "(x) stock tar --zstd archive, uint8, collate_fn=collate"
STOCK_RING = "(xiii) stock tar --zstd archive, uint8, collate_fn=collate, reuse_batch_buffers=3"
FIRST_STOCK = (STOCK, STOCK_U8, STOCK_RING)  # the stock archive's rows timed from nothing
PIL_FOLDER = "(xiv) class folders, PIL (torchvision ImageFolder + Resize + ToTensor)"
EXTRACTED = "(iii) on the stock archive extracted first"
TARGETS = (224, 128, 64)
BATCH = 64
WORKERS = 2
REUSE = 3  # reuse_batch_buffers: prefetch_factor (2) + 1
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


_REDUCED = ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
            (2, cv2.IMREAD_REDUCED_COLOR_2))  # fmt: skip


def opencv_decode(data: bytes, target: int) -> torch.Tensor:
    """The baselines' decode: OpenCV, RGB, ``INTER_AREA`` to the target, float32 C×H×W.

    Decoded at the largest of 1/8, 1/4, 1/2 that still covers the target (else full size).
    """
    flag = cv2.IMREAD_COLOR
    for factor, reduced in _REDUCED:
        if SIZE // factor >= target:
            flag = reduced
            break
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if bgr is None:
        raise ValueError("OpenCV cannot decode this image")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if rgb.shape[0] != target:
        rgb = cv2.resize(rgb, (target, target), interpolation=cv2.INTER_AREA)
    return image_to_tensor(rgb)


def pil_decode(data: bytes, target: int) -> torch.Tensor:
    """torchvision's ``ImageFolder`` + ``Resize`` + ``ToTensor``: PIL, full decode, bilinear."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB").resize((target, target), Image.Resampling.BILINEAR)
    return image_to_tensor(np.asarray(rgb))


def our_decode(data: bytes, target: int) -> torch.Tensor:
    return image_to_tensor(decode_image(data, target_size=target))


class FolderDataset(Dataset[tuple[torch.Tensor, int]]):
    """ImageFolder's way: scan class folders, one ``open().read()`` per item."""

    def __init__(self, root: str, target: int, decode: Callable[[bytes, int], Any]) -> None:
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]
        self.target, self.decode = target, decode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, y = self.samples[i]
        with open(path, "rb") as fh:
            return self.decode(fh.read(), self.target), y


class ZipfileDataset(Dataset[tuple[torch.Tensor, int]]):
    """What a user writes without us: stdlib ``zipfile``, one ``ZipFile`` per worker process.

    Each is opened on first use, from what ``opener`` returns (a path or a file object);
    labels come from the folder. Also the baseline of ``_first_batch.py`` (local and on S3).
    """

    def __init__(
        self, opener: Callable[[], str | BinaryIO], decode: Callable[[bytes], torch.Tensor]
    ) -> None:
        with zipfile.ZipFile(opener()) as zf:
            self.names = [n for n in zf.namelist() if not n.endswith("/")]
        classes = sorted({n.split("/")[0] for n in self.names})
        idx = {c: i for i, c in enumerate(classes)}
        self.labels = [idx[n.split("/")[0]] for n in self.names]
        self.opener, self.decode = opener, decode
        self._zf: zipfile.ZipFile | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self._zf is None or self._pid != os.getpid():
            self._zf, self._pid = zipfile.ZipFile(self.opener()), os.getpid()
        return self.decode(self._zf.read(self.names[i])), self.labels[i]


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
    stock = tmp / "stock.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(stock), "-C", str(root), "."], check=True)
    return {
        "zip": zip_path,
        "tar.zst": tzst_path,
        "stock": stock,
        "seekable_cache": tmp / "seekable-cache",
        "extracted": tmp / "extracted",
        "folders": root,
        "wds": urls,
        "bytes": {
            "zip": zip_path.stat().st_size,
            "tar.zst": tzst_path.stat().st_size,
            "stock": stock.stat().st_size,
        },
    }


def shuffled_loader(ds: Dataset[Any], workers: int = WORKERS, **kw: Any) -> DataLoader[Any]:
    """The loader of every variant: ``BATCH`` a batch, shuffled with a fixed seed."""
    g = torch.Generator().manual_seed(0)
    return DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, generator=g, **kw)


def extracted_folder(paths: dict[str, Any], target: int) -> Callable[[], DataLoader[Any]]:
    """(iii) on a folder made by extracting the stock archive (``tar --zstd -xf``) first."""
    dest = paths["extracted"]

    def make() -> DataLoader[Any]:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        subprocess.run(["tar", "--zstd", "-xf", str(paths["stock"]), "-C", str(dest)], check=True)
        return shuffled_loader(FolderDataset(str(dest), target, opencv_decode))

    return make


def loaders(
    paths: dict[str, Any], target: int, workers: int = WORKERS
) -> dict[str, Callable[[], DataLoader[Any]]]:
    def shuffled(ds: Dataset[Any], **kw: Any) -> DataLoader[Any]:
        return shuffled_loader(ds, workers, **kw)

    def ours(path: Path, **opts: Any) -> Callable[[], DataLoader[Any]]:
        kw = {"collate_fn": collate} if opts.pop("collated", False) else {}
        cache = paths["seekable_cache"]
        return lambda: shuffled(
            CDMLStreamDataset(
                path,
                is_image=True,
                target_size=target,
                labels="folder",
                seekable_cache=cache,
                **opts,
            ),
            **kw,
        )

    def folders(decode: Callable[[bytes, int], Any]) -> Callable[[], DataLoader[Any]]:
        return lambda: shuffled(FolderDataset(str(paths["folders"]), target, decode))

    def wds() -> DataLoader[Any]:
        import webdataset

        ds = (
            webdataset.WebDataset(paths["wds"], shardshuffle=False, empty_check=False)
            .to_tuple("jpg", "cls")
            .map_tuple(lambda b: opencv_decode(b, target), lambda b: int(b))
        )
        return DataLoader(ds, batch_size=BATCH, num_workers=workers)

    return {
        "(i) ZIP (CDMLStreamDataset)": ours(paths["zip"]),
        "(ii) tar.zst (CDMLStreamDataset)": ours(paths["tar.zst"]),
        FOLDER: folders(opencv_decode),
        "(iv) stdlib zipfile": lambda: shuffled(
            ZipfileDataset(
                functools.partial(str, paths["zip"]),
                functools.partial(opencv_decode, target=target),
            )
        ),
        "(v) WebDataset tar shards": wds,
        "(vi) class folders, our decoder": folders(our_decode),
        "(vii) ZIP, float32, collate_fn=collate": ours(paths["zip"], collated=True),
        "(viii) ZIP, uint8, collate_fn=collate": ours(
            paths["zip"], collated=True, image_dtype="uint8"
        ),
        STOCK: ours(paths["stock"]),
        STOCK_U8: ours(paths["stock"], collated=True, image_dtype="uint8"),
        "(xi) ZIP, float32, collate_fn=collate, reuse_batch_buffers=3": ours(
            paths["zip"], collated=True, reuse_batch_buffers=REUSE
        ),
        "(xii) ZIP, uint8, collate_fn=collate, reuse_batch_buffers=3": ours(
            paths["zip"], collated=True, image_dtype="uint8", reuse_batch_buffers=REUSE
        ),
        STOCK_RING: ours(
            paths["stock"], collated=True, image_dtype="uint8", reuse_batch_buffers=REUSE
        ),
        PIL_FOLDER: folders(pil_decode),
    }


_CEILING_DATA: list[bytes] = []


def _decode_range(job: tuple[int, int, int]) -> int:
    start, stop, target = job
    for data in _CEILING_DATA[start:stop]:
        decode_image(data, target_size=target)
    return stop - start


def ceiling_rate(items: list[tuple[str, bytes]], target: int, workers: int = WORKERS) -> float:
    """Images/s of ``decode_image`` alone over the JPEG bytes in memory, in ``workers`` processes.

    Forked processes that already hold the bytes; batches of ``BATCH`` handed out in turn;
    timed from the first batch handed out to the last one done (the processes started).
    """
    _CEILING_DATA[:] = [d for _, d in items]
    jobs = [(k, min(k + BATCH, len(items)), target) for k in range(0, len(items), BATCH)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_decode_range, [(0, 1, target)] * workers)  # started and warm
        t0 = time.perf_counter()
        done = sum(pool.imap_unordered(_decode_range, jobs))
        rate = done / (time.perf_counter() - t0)
    return rate


def ceiling_cpu(items: list[tuple[str, bytes]], target: int) -> float:
    """µs of CPU per image of ``decode_image`` from memory, from the cheapest batch."""
    per_batch = []
    for k in range(0, len(items), BATCH):
        c0 = time.process_time()
        for _, data in items[k : k + BATCH]:
            decode_image(data, target_size=target)
        per_batch.append((time.process_time() - c0) / len(items[k : k + BATCH]))
    return min(per_batch) * 1e6


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


def images_per_s(make: Callable[[], DataLoader[Any]], n: int) -> float:
    """Steady images/s of one epoch (after its first batch)."""
    return run_once(make, n)[1]


def cpu_per_image(make: Callable[[], DataLoader[Any]], n: int) -> float:
    """µs of CPU per image in this process (``num_workers=0``), from the cheapest batch.

    The cheapest batch of the epoch: the work itself, which other load on the machine
    disturbs far less than wall time (bursts of contention only make some batches dearer).
    """
    it = iter(make())
    per_batch = []
    seen = 0
    while True:
        c0 = time.process_time()
        try:
            x, _ = next(it)
        except StopIteration:
            break
        per_batch.append((time.process_time() - c0) / x.shape[0])
        seen += x.shape[0]
    assert seen == n, f"saw {seen} of {n} images"
    return min(per_batch) * 1e6


def first_epoch(make: Callable[[], DataLoader[Any]], n: int, reset: Callable[[], None]) -> float:
    """Images/s of a whole first epoch: ``reset()``, then the dataset built and every batch."""
    reset()
    t0 = time.perf_counter()
    seen = sum(x.shape[0] for x, _ in make())
    assert seen == n, f"saw {seen} of {n} images"
    return n / (time.perf_counter() - t0)


def print_table(title: str, best: dict[int, dict[str, float]], fmt: str, higher: bool) -> None:
    print(title)
    targets = list(best)
    cols = " | ".join(f"{t} px {fmt} | vs (iii) | vs (c)" for t in targets)
    print(f"| variant | {cols} |")
    print("|---|" + "---:|---:|---:|" * len(targets))
    for name in best[targets[0]]:
        cells = []
        for t in targets:
            v, b, c = best[t][name], best[t][FOLDER], best[t][CEILING]
            r = (ratio(v, b), ratio(v, c)) if higher else (ratio(b, v), ratio(c, v))
            cells.append(f"{v:,.0f} | {r[0]} | {r[1]}")
        print(f"| {name} | {' | '.join(cells)} |")


def measure(
    paths: dict[str, Any], items: list[tuple[str, bytes]], target: int, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Best images/s, cheapest CPU µs per image, first-epoch images/s at ``target``."""
    n = len(items)
    makers = loaders(paths, target)
    fns: dict[str, Callable[[], float]] = {CEILING: functools.partial(ceiling_rate, items, target)}
    fns.update({k: functools.partial(images_per_s, make, n) for k, make in makers.items()})
    rates = rounds(fns, args.reps)
    inline = loaders(paths, target, workers=0)
    cfns: dict[str, Callable[[], float]] = {CEILING: functools.partial(ceiling_cpu, items, target)}
    cfns.update({k: functools.partial(cpu_per_image, make, n) for k, make in inline.items()})
    costs = rounds(cfns, args.cpu_reps)
    drop = functools.partial(shutil.rmtree, paths["seekable_cache"], ignore_errors=True)
    firsts = rounds(
        {
            STOCK: functools.partial(first_epoch, makers[STOCK], n, drop),
            STOCK_U8: functools.partial(first_epoch, makers[STOCK_U8], n, drop),
            STOCK_RING: functools.partial(first_epoch, makers[STOCK_RING], n, drop),
            FOLDER: functools.partial(first_epoch, makers[FOLDER], n, lambda: None),
            EXTRACTED: functools.partial(
                first_epoch, extracted_folder(paths, target), n, lambda: None
            ),
        },
        args.reps,
    )
    return (
        {k: max(v) for k, v in rates.items() if v},
        {k: min(v) for k, v in costs.items() if v},
        {k: max(v) for k, v in firsts.items() if v},
    )


def conversion_seconds(stock: Path, cache: Path) -> float:
    """Seconds to open the stock archive with an empty seekable cache (its conversion)."""
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    CDMLStreamDataset(stock, is_image=True, labels="folder", seekable_cache=cache)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--targets", type=int, nargs="+", default=list(TARGETS))
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--cpu-reps", type=int, default=2, help="runs of the CPU-per-image table (0: skip it)"
    )
    args = ap.parse_args()
    n = args.images - args.images % BATCH
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    best: dict[int, dict[str, float]] = {}
    cpu: dict[int, dict[str, float]] = {}
    first: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
        items = make_images(n)
        paths = build(Path(tmp), items, shards=2 * WORKERS)
        convert_s = conversion_seconds(paths["stock"], paths["seekable_cache"])
        for target in args.targets:
            best[target], cpu[target], first[target] = measure(paths, items, target, args)
    report(args, n, items, paths, convert_s, best, cpu, first)
    print(f"total {time.perf_counter() - t_start:.0f} s")
    if args.json:
        out = {"images_per_s": best, "cpu_us_per_image": cpu, "first_epoch": first}
        args.json.write_text(json.dumps(out, indent=2))
    return 0


def report(
    args: argparse.Namespace,
    n: int,
    items: list[tuple[str, bytes]],
    paths: dict[str, Any],
    convert_s: float,
    best: dict[int, dict[str, float]],
    cpu: dict[int, dict[str, float]],
    first: dict[int, dict[str, float]],
) -> None:
    jpeg_kb = sum(len(d) for _, d in items) / n / 1024
    print(
        f"{n} JPEGs of {SIZE}x{SIZE} (mean {jpeg_kb:.1f} KB), batch_size={BATCH}, best of "
        f"{args.reps}; torch and OpenCV threads 1, {os.cpu_count()} CPUs, load average "
        f"{load_average():.1f} at the end; JPEG decoder {jpeg_backend.backend()}, area "
        f"shrink {area_backend()}"
    )
    mb = paths["bytes"]["stock"] / 1e6
    print(f"stock tar --zstd archive {mb:.1f} MB: dataset built, copy made, in {convert_s:.2f} s")
    if args.reps and best:
        print_table(f"images/s, DataLoader(num_workers={WORKERS}):", best, "img/s", higher=True)
        print("first epoch, dataset built (stock: its copy made) then every batch:")
        for t, f in first.items():
            cells = ", ".join(
                f"{k.split(',', 1)[1].strip()} {f[k]:,.0f} img/s ({ratio(f[k], f[FOLDER])})"
                for k in FIRST_STOCK
            )
            print(f"  {t} px: folder {f[FOLDER]:,.0f} img/s; stock archive: {cells}")
            cells = ", ".join(
                f"{k.split(',', 1)[1].strip()} {ratio(f[k], f[EXTRACTED])}" for k in FIRST_STOCK
            )
            print(
                f"  {t} px: the folder extracted first (tar --zstd -xf, then every batch) "
                f"{f[EXTRACTED]:,.0f} img/s; the stock archive against it: {cells}"
            )
    if args.cpu_reps and any(cpu.values()):
        print_table(
            f"CPU µs per image, num_workers=0, cheapest batch of {args.cpu_reps} epochs "
            "(ratio: (iii) ÷ variant, (c) ÷ variant):",
            cpu,
            "µs",
            higher=False,
        )


if __name__ == "__main__":
    sys.exit(main())
