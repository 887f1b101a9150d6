"""Every Python snippet of the cdmltrain 1.1.4 README, run on cdml-edge.

Names are translated (``cdmltrain`` / ``live_connector`` -> ``cdml_edge``); what the user
provides in the seed's snippets (``model``, ``transform``, ``optimizer``, the archives and
folders) is made here from real data. Each test asserts what the seed promises about the
result: types, shapes, counts. The differences that stay are in README, "Coming from
cdmltrain".
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import zstandard
from helpers.dataset_data import class_images, wav
from helpers.paths import ROOT
from helpers.s3_server import S3Server

from cdml_edge.archive import pack, write_archive
from cdml_edge.archive.s3 import ENDPOINT_ENV, INDEX_CACHE_ENV

if TYPE_CHECKING:
    from torch import nn


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The seed's snippets use relative paths: run them in a fresh folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tiny_model(out: int = 10) -> nn.Module:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, out)
    )


# -- Installation ------------------------------------------------------------------------------
def test_install_extras_zstd_and_full() -> None:
    """``pip install cdmltrain[zstd]`` / ``[full]``: both extras exist.

    ``full`` holds every other runtime extra; zstd support is in the core install.
    """
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "zstd" in extras and "full" in extras
    assert any(d.startswith("zstandard") for d in project["dependencies"])
    tooling = ("dev", "docs", "full")  # the test and documentation tools are not runtime
    runtime = {d for name, deps in extras.items() if name not in tooling for d in deps}
    assert runtime <= set(extras["full"])


# -- Quick Start -------------------------------------------------------------------------------
def test_basic_usage_zip_any_data(here: Path) -> None:
    write_archive(
        "training_data.zip", [(f"rec/{i:03d}.bin", os.urandom(50 + i)) for i in range(70)]
    )
    printed: list[str] = []

    # -- the seed's snippet --
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    dataset = CDMLStreamDataset("training_data.zip")
    loader = DataLoader(dataset, batch_size=32, num_workers=4)

    for batch in loader:
        raw_bytes = batch  # Process however you need
        printed.append(f"Batch loaded: {len(batch)} items")
    # --
    assert printed == ["Batch loaded: 32 items", "Batch loaded: 32 items", "Batch loaded: 6 items"]
    assert all(isinstance(b, bytes) for b in raw_bytes)


def test_image_dataset_with_transforms(here: Path) -> None:
    import torch
    from torch.nn.functional import interpolate

    write_archive("images.zip", class_images(4))
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]

    def transform(img: np.ndarray) -> torch.Tensor:
        """Resize((224, 224)) + ToTensor() + Normalize(...) in plain torch.

        Applied to the uint8 H×W×3 image we give a transform (torchvision is not needed, nor
        forbidden).
        """
        t = torch.from_numpy(img).permute(2, 0, 1).float().div(255)
        t = interpolate(t[None], size=(224, 224), mode="bilinear", align_corners=False)[0]
        return (t - mean) / std

    model = _tiny_model()
    shapes = []

    # -- the seed's snippet --
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    dataset = CDMLStreamDataset("images.zip", is_image=True, transform=transform)
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)

    for images in loader:
        predictions = model(images)  # Direct to model — no disk extraction!
        shapes.append((tuple(images.shape), tuple(predictions.shape)))
    # --
    assert shapes == [((12, 3, 224, 224), (12, 10))]


def _plain_tar_zst(path: Path, items: list[tuple[str, bytes]]) -> None:
    """A tar.zst as ``tar --zstd`` makes it: one zstd frame, not seekable."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(buf.getvalue()))


@pytest.mark.parametrize("maker", ["seekable", "tar --zstd"])
def test_zstd_archive_is_detected(here: Path, maker: str) -> None:
    items = [(f"d/{i}.bin", os.urandom(100)) for i in range(20)]
    if maker == "seekable":
        Path("data.tar.zst").write_bytes(pack(items, format="tar.zst"))
    else:
        _plain_tar_zst(here / "data.tar.zst", items)
    from cdml_edge import CDMLStreamDataset

    # -- the seed's snippet --
    dataset = CDMLStreamDataset("data.tar.zst")  # Auto-detects ZSTD
    # Everything else is identical — same API
    # --
    assert len(dataset) == 20 and [dataset[i] for i in range(20)] == [d for _, d in items]


def test_s3_streaming_reads_ranges_only(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [(f"part/{i:03d}.bin", os.urandom(20_000)) for i in range(100)]
    blob = pack(items, format="zip", level=1)
    s3_server.put("my-bucket", "dataset.zip", blob)
    monkeypatch.setenv(ENDPOINT_ENV, s3_server.proxy.url)
    monkeypatch.delenv(INDEX_CACHE_ENV, raising=False)
    s3_server.proxy.reset()
    from cdml_edge import CDMLStreamDataset

    # -- the seed's snippet --
    dataset = CDMLStreamDataset("s3://my-bucket/dataset.zip")
    # Reads via byte-range HTTP requests — never downloads the full file
    # --
    assert len(dataset) == 100 and dataset[42] == items[42][1]
    fetched = s3_server.proxy.body_bytes("GET")
    assert fetched < len(blob) / 10, (fetched, len(blob))


# -- Step-by-step ------------------------------------------------------------------------------
def test_step_by_step(here: Path) -> None:
    import torch

    folder = here / "data_folder"
    for name, data in class_images(8):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    # Step 1
    shutil.make_archive("my_data", "zip", "data_folder")
    # Step 2
    from cdml_edge import CDMLStreamDataset

    dataset = CDMLStreamDataset(
        path="my_data.zip",
        is_image=True,  # Set to True if the ZIP contains images
        cache_size_mb=100,  # Keeps 100MB of recently used data in RAM
    )
    # Step 3
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)
    # Step 4 (the seed's model returns its loss)
    net = _tiny_model(1)

    def model(x: torch.Tensor) -> torch.Tensor:
        return net(x).pow(2).mean()

    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    seen = []
    for _epoch in range(10):
        for batch_images in loader:
            # batch_images is a standard PyTorch tensor!
            loss = model(batch_images)
            loss.backward()
            optimizer.step()
            seen.append(batch_images)
    assert len(dataset) == 24 and len(seen) == 10
    assert all(isinstance(b, torch.Tensor) and b.shape == (24, 3, 32, 48) for b in seen)
    assert all(b.dtype == torch.float32 and b.min() >= 0 and b.max() <= 1 for b in seen)


# -- Live data pipeline ------------------------------------------------------------------------
LIVE_PRELUDE = """
import numpy as np, torch
def transform(img):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()[None] / 255
def model(x):
    return x.mean(dim=(1, 2, 3))
"""

WATCH_AND_PACK = """
from cdml_edge.live import watch_and_pack
from cdml_edge.data.live_loader import LiveBatchLoader

# 1. Your callback processes each batch
def on_new_batch(zip_path):
    loader = LiveBatchLoader(zip_path)

    images = loader.get_images()        # PIL Images ready for model
    audio  = loader.get_audio(n_mfcc=20)  # MFCC features extracted
    sensor = loader.get_tabular()       # CSV rows as dicts
    logs   = loader.get_text()          # Text files parsed

    for img in images:
        prediction = model(transform(img))
        print(f"Prediction: {prediction}")
    print("batch", len(images), type(images[0]).__module__, [a["mfcc"].shape for a in audio],
          sensor, [(t["lines"], t["word_count"]) for t in logs], flush=True)

# 2. Start monitoring — automatically packs & processes
watch_and_pack(
    input_folder="live_input",           # Camera drops files here
    output_folder="live_batches",        # Temporary ZIP storage
    on_batch_ready=on_new_batch,         # Your processing callback
    interval_seconds=10,                 # Scan every 10 seconds
    auto_delete=True                     # Clean up after processing
)
print("stopped", flush=True)
"""

WATCH_IN_MEMORY = """
from PIL import Image
from cdml_edge.live import watch_in_memory

def process_instantly(filepath, data_type):
    if data_type == 'image':
        img = Image.open(filepath)
        result = model(transform(np.asarray(img.convert("RGB"))))
        print("image", img.size, float(result[0]) > 0.5, flush=True)
    elif data_type == 'audio':
        # Process audio in real-time
        print("audio", filepath.endswith(".wav"), flush=True)

watch_in_memory("live_input", process_instantly)
# Uses OS-level file watching (Watchdog) — sub-second latency
print("stopped", flush=True)
"""


def _run_until(
    here: Path, code: str, drop: list[tuple[str, bytes]], lines: int, timeout: float = 60
) -> list[str]:
    """Run a blocking snippet, drop files into ``live_input``, then Ctrl-C it (SIGINT).

    ``lines`` lines of its output are read before the Ctrl-C, the rest after it.
    """
    (here / "live_input").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", LIVE_PRELUDE + code],
        cwd=here,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        time.sleep(3.0)  # imports done, the watch armed
        for name, data in drop:
            tmp = here / "live_input" / f"{name}.part"
            tmp.write_bytes(data)
            os.replace(tmp, here / "live_input" / name)
        out = [proc.stdout.readline().rstrip("\n") for _ in range(lines)]
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    return out + rest.splitlines()


@pytest.mark.slow  # a live watcher process, fed files, stopped with Ctrl-C
def test_live_watch_and_pack(here: Path) -> None:
    drop = [
        *class_images(1)[:2],
        ("mic.wav", wav(1.0, 440)),
        ("plc.csv", b"temp,state\n36.5,NORMAL\n40.0,HOT\n"),
        ("ops.txt", b"belt two stopped\n\nrestarted\n"),
    ]
    drop = [(Path(n).name if "/" not in n else n.replace("/", "_"), d) for n, d in drop]
    out = _run_until(here, WATCH_AND_PACK, drop, lines=3)
    assert out[0].startswith("Prediction: tensor([") and out[1].startswith("Prediction: ")
    assert out[2] == (
        "batch 2 PIL.Image [(20, 32)]"
        " [{'temp': 36.5, 'state': 'NORMAL'}, {'temp': 40.0, 'state': 'HOT'}]"
        " [(['belt two stopped', 'restarted'], 4)]"
    )
    assert out[3:] == ["stopped"]
    # auto_delete: the inputs and the temporary archive are gone
    assert list((here / "live_input").iterdir()) == []
    assert list((here / "live_batches").iterdir()) == []


def test_live_watch_in_memory(here: Path) -> None:
    drop = [("cam.jpg", class_images(1)[0][1]), ("mic.wav", wav(0.2, 440))]
    out = _run_until(here, WATCH_IN_MEMORY, drop, lines=2)
    assert out == ["image (48, 32) False", "audio True", "stopped"]
    assert sorted(p.name for p in (here / "live_input").iterdir()) == ["cam.jpg", "mic.wav"]


# -- Tier 2 ------------------------------------------------------------------------------------
def test_neural_compression_tier2(here: Path) -> None:
    import torch

    write_archive("train.zip", class_images(8))
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    torch.manual_seed(0)
    train_set = CDMLStreamDataset("train.zip", is_image=True, labels="folder", target_size=32)
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    image_batch = torch.stack([train_set[i][0] for i in range(len(train_set))])

    # -- the seed's snippet --
    from cdml_edge import CDMLLoss, CDMLTrainer, CDMLTrainTier2

    # Initialize autoencoder (48:1 compression ratio)
    model = CDMLTrainTier2(latent_dim=64, num_classes=10)

    # Train with joint optimization
    trainer = CDMLTrainer(model, lr=0.001)
    trainer.train(train_loader, epochs=20)

    # Inference: classify from compressed code only
    z = model.compress(image_batch)  # 3072D → 64D
    logits = model.classifier(z)  # 64D → 10 classes
    # --
    assert CDMLLoss is not None and len(trainer.history) == 20
    assert image_batch[0].numel() == 3072 and z.shape == (24, 64) and logits.shape == (24, 10)
    assert image_batch[0].numel() // z.shape[1] == 48  # the 48:1 ratio
    model.eval()
    labels = torch.tensor(train_set.targets)
    assert (model.predict(image_batch) == labels).float().mean() >= 0.9
    assert model.compress(image_batch.flatten(1)).shape == (24, 64)  # 3072-D vectors too


def test_multimodal_encoders() -> None:
    import torch

    waveform, features, sequence = (
        torch.randn(4, 1, 16000),
        torch.randn(4, 20),
        torch.randn(4, 50, 8),
    )

    # -- the seed's snippet --
    from cdml_edge import AudioEncoder, TabularEncoder, TimeSeriesEncoder

    # Audio: Raw waveform → latent code
    audio_enc = AudioEncoder(latent_dim=64)
    z_audio = audio_enc(waveform)  # [B, 1, 16000] → [B, 64]

    # Tabular: Feature vector → latent code
    tab_enc = TabularEncoder(input_dim=20, latent_dim=64)
    z_tab = tab_enc(features)  # [B, 20] → [B, 64]

    # Time Series: Sequential data → latent code
    ts_enc = TimeSeriesEncoder(input_features=8, latent_dim=64)
    z_ts = ts_enc(sequence)  # [B, 50, 8] → [B, 64]
    # --
    # the README's promise: each call gives the latent tensor
    for z in (z_audio, z_tab, z_ts):
        assert isinstance(z, torch.Tensor) and z.shape == (4, 64)
    assert set(audio_enc(waveform, return_dict=True)) == {"latent"}  # the dict, asked for
    assert audio_enc.compress(waveform).shape == (4, 64)
    # the seed's layout is the one taken: time steps second, features last
    ts_enc.eval()
    moved = ts_enc.compress(sequence.transpose(1, 2).contiguous().transpose(1, 2))
    torch.testing.assert_close(moved, ts_enc.compress(sequence))
    with pytest.raises(RuntimeError):
        ts_enc.compress(sequence.transpose(1, 2))  # (B, 8, 50) is not the seed's layout


# -- Configuration -----------------------------------------------------------------------------
def test_configuration(here: Path) -> None:
    write_archive("data.zip", [("a/1.jpg", class_images(1)[0][1])])
    from cdml_edge import CDMLStreamDataset

    # -- the seed's snippet --
    ds = CDMLStreamDataset(
        path="data.zip",  # ZIP, .tar.zst, or s3:// path
        is_image=False,  # True → auto-decode as PIL Image
        transform=None,  # torchvision transforms (for images)
        cache_size_mb=50,  # LRU cache size (memory-safe)
        target_size=(224, 224),  # Resize images on load
    )
    # --
    assert isinstance(ds[0], bytes)  # is_image=False: raw bytes
    img = CDMLStreamDataset("data.zip", is_image=True, target_size=(224, 224))[0]
    assert img.shape == (3, 224, 224)
