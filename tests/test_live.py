"""LiveBatchLoader: one read of a real archive, decoded per modality, numpy only (no torch)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _dataset_data import class_images, wav

from cdml_edge.archive import pack
from cdml_edge.data.live import LiveBatchLoader
from cdml_edge.decode import CsvTable, DecodeError, TextData


def _window() -> list[tuple[str, bytes]]:
    npy = io.BytesIO()
    np.save(npy, np.arange(10, dtype=np.float64).reshape(5, 2))
    return [
        *class_images(1),
        ("mic/a.wav", wav(0.5, 440)),
        ("plc/s.csv", b"ts,temp\n2024-01-01,20.5\n2024-01-02,21.0\n"),
        ("vib/v.npy", npy.getvalue()),
        ("meta/e.json", json.dumps({"line": 3}).encode()),
        ("ops/n.txt", b"belt two stopped\n"),
        ("raw/blob.bin", b"\x00\x01\x02"),
    ]


@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_getters_from_bytes(fmt: str) -> None:
    live = LiveBatchLoader(pack(_window(), format=fmt))
    images = live.get_images(target_size=(16, 8))
    assert list(images) == ["pets/cat/00.jpg", "pets/dog/00.jpg", "pets/eel/00.jpg"]
    assert all(a.shape == (8, 16, 3) and a.dtype == np.uint8 for a in images.values())
    assert images["pets/cat/00.jpg"][..., 0].mean() > 180  # red channel first
    audio = live.get_audio(n_mfcc=13)
    assert audio["mic/a.wav"].shape == (13, 1 + 8000 // 512)
    csv = live.get_csv()["plc/s.csv"]
    assert isinstance(csv, CsvTable) and csv.columns == ["temp"]
    tab = live.get_tabular()
    assert list(tab) == ["plc/s.csv", "vib/v.npy"] and tab["vib/v.npy"].shape == (5, 2)
    assert live.get_json() == {"meta/e.json": {"line": 3}}
    text = live.get_text()["ops/n.txt"]
    assert isinstance(text, TextData) and text.word_count == 3
    everything = live.get_all()
    assert set(everything) == {"image", "audio", "csv", "timeseries", "json", "text", "binary"}
    assert everything["binary"] == {"raw/blob.bin": b"\x00\x01\x02"}
    s = live.summary()
    assert s["members"] == 9 and s["modalities"]["image"]["count"] == 3
    assert s["bytes"] == sum(len(d) for _, d in _window())


def test_reads_the_archive_once_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "w.zip"
    path.write_bytes(pack(_window()))
    live = LiveBatchLoader(path)
    path.unlink()  # everything was read at construction: the file is no longer needed
    assert len(live.get_images()) == 3 and live.get_json()["meta/e.json"]["line"] == 3
    assert live.get_images() is live.get_images()  # decoded once, memoised
    # the same options spelled differently share the memo
    assert live.get_all()["audio"] is live.get_audio(n_mfcc=20, sample_rate=16000)
    assert live.get_all(target_size=8)["image"] is live.get_images(8)


def test_bad_member_raise_or_skip() -> None:
    good = class_images(1)[0][1]
    data = pack([("a.jpg", good), ("b.jpg", good[:100]), ("c.wav", b"not audio")])
    with pytest.raises(DecodeError) as err:
        LiveBatchLoader(data).get_images()
    assert err.value.member == "b.jpg"
    live = LiveBatchLoader(data, on_error="skip")
    assert list(live.get_images()) == ["a.jpg"] and live.get_audio() == {}
    assert sorted(live.errors) == ["b.jpg", "c.wav"] and live.summary()["errors"] == [
        "b.jpg",
        "c.wav",
    ]


def test_modality_override() -> None:
    live = LiveBatchLoader(
        pack([("cam/frame.raw", class_images(1)[0][1])]), modalities={"cam/frame.raw": "image"}
    )
    assert live.get_images()["cam/frame.raw"].shape == (32, 48, 3)


def test_live_and_decode_do_not_import_torch() -> None:
    code = (
        "import sys, cdml_edge.data.live, cdml_edge.decode, cdml_edge.data.cache\n"
        "from cdml_edge import LiveBatchLoader\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
