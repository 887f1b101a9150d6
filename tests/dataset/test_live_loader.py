"""LiveBatchLoader: one read of a real archive, decoded per modality, numpy only (no torch)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.dataset_data import class_images, wav

from cdml_edge.archive import pack
from cdml_edge.data.live_loader import LiveBatchLoader
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
    images = live.get_images(target_size=(16, 8), by_member=True)
    assert list(images) == ["pets/cat/00.jpg", "pets/dog/00.jpg", "pets/eel/00.jpg"]
    assert all(a.shape == (8, 16, 3) and a.dtype == np.uint8 for a in images.values())
    assert images["pets/cat/00.jpg"][..., 0].mean() > 180  # red channel first
    audio = live.get_audio(n_mfcc=13, by_member=True)
    assert audio["mic/a.wav"].shape == (13, 1 + 8000 // 512)
    csv = live.get_csv(by_member=True)["plc/s.csv"]
    assert isinstance(csv, CsvTable) and csv.columns == ["temp"]
    tab = live.get_tabular(by_member=True)
    assert list(tab) == ["plc/s.csv", "vib/v.npy"] and tab["vib/v.npy"].shape == (5, 2)
    assert live.get_json(by_member=True) == {"meta/e.json": {"line": 3}}
    text = live.get_text(by_member=True)["ops/n.txt"]
    assert isinstance(text, TextData) and text.word_count == 3
    everything = live.get_all(by_member=True)
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
    assert len(live.get_images()) == 3 and live.get_json(by_member=True)["meta/e.json"]["line"] == 3
    assert live.get_images(by_member=True) is live.get_images(by_member=True)  # memoised
    # the same options spelled differently share the memo
    assert live.get_all(by_member=True)["audio"] is live.get_audio(20, by_member=True)
    images = live.get_images(8, by_member=True)
    assert live.get_all(target_size=8, by_member=True)["image"] is images


def test_bad_member_raise_or_skip() -> None:
    good = class_images(1)[0][1]
    data = pack([("a.jpg", good), ("b.jpg", good[:100]), ("c.wav", b"not audio")])
    with pytest.raises(DecodeError) as err:
        LiveBatchLoader(data).get_images()
    assert err.value.member == "b.jpg"
    live = LiveBatchLoader(data, on_error="skip")
    assert list(live.get_images(by_member=True)) == ["a.jpg"] and live.get_audio() == []
    assert sorted(live.errors) == ["b.jpg", "c.wav"] and live.summary()["errors"] == [
        "b.jpg",
        "c.wav",
    ]


def test_modality_override() -> None:
    live = LiveBatchLoader(
        pack([("cam/frame.raw", class_images(1)[0][1])]), modalities={"cam/frame.raw": "image"}
    )
    assert live.get_images(by_member=True)["cam/frame.raw"].shape == (32, 48, 3)


def test_live_and_decode_do_not_import_torch() -> None:
    code = (
        "import sys, cdml_edge.data.live_loader, cdml_edge.decode, cdml_edge.data.cache\n"
        "from cdml_edge import LiveBatchLoader\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_seed_shapes_by_default() -> None:
    """The seed's forms: lists in archive order, rows and records as dicts."""
    live = LiveBatchLoader(pack(_window(), format="zip"))
    images = live.get_images(target_size=(16, 8), as_pil=False)
    assert isinstance(images, list) and len(images) == 3
    assert all(a.shape == (8, 16, 3) and a.dtype == np.uint8 for a in images)
    [audio] = live.get_audio(n_mfcc=13)
    assert audio["filename"] == "mic/a.wav" and audio["mfcc"].shape == (13, 1 + 8000 // 512)
    assert audio["mfcc_mean"].shape == (13,) and audio["sample_rate"] == 16000
    [wave] = live.get_audio(mode="waveform", sample_rate=8000)
    assert wave["waveform"].shape == (4000,) and wave["duration_s"] == 0.5
    assert live.get_csv() == [
        {"temp": 20.5, "ts": "2024-01-01"},
        {"temp": 21.0, "ts": "2024-01-02"},
    ]
    assert live.get_tabular() == [*live.get_csv(), {"line": 3}]
    assert live.get_json() == [{"line": 3}]
    [text] = live.get_text()
    assert text["lines"] == ["belt two stopped"] and text["word_count"] == 3
    assert text["line_count"] == 1 and text["filename"] == "ops/n.txt"
    everything = live.get_all()
    assert set(everything) == {"images", "audio", "csv", "json", "text"}
    assert len(everything["images"]) == 3 and everything["json"] == [{"line": 3}]
    assert all(isinstance(a, np.ndarray) for a in live.get_all(as_pil=False)["images"])
    s = live.summary()
    assert (s["total_files"], s["images"], s["audio_files"], s["csv_files"]) == (9, 3, 1, 1)
    assert (s["json_files"], s["text_files"], s["tabular_files"]) == (1, 1, 2)
    assert s["manifest_present"] is False


def test_get_images_gives_pil_images_by_default_and_arrays_by_option() -> None:
    """cdmltrain's ``get_images()``: PIL images ready for a model; arrays with ``as_pil=False``."""
    from PIL import Image

    live = LiveBatchLoader(pack(_window(), format="zip"))
    pil = live.get_images()
    assert all(isinstance(p, Image.Image) for p in pil) and len(pil) == 3
    assert [p.size for p in pil] == [(48, 32)] * 3 and {p.mode for p in pil} == {"RGB"}
    assert [p.size for p in live.get_images(target_size=(16, 8))] == [(16, 8)] * 3
    arrays = live.get_images(as_pil=False)
    assert all(isinstance(a, np.ndarray) and a.dtype == np.uint8 for a in arrays)
    assert np.array_equal(np.asarray(pil[0]), arrays[0])
    assert all(isinstance(p, Image.Image) for p in live.get_all()["images"])


def test_the_live_path_needs_no_pillow(tmp_path: Path) -> None:
    """With Pillow unimportable, arrays work and the PIL default says what to do."""
    archive = tmp_path / "w.zip"
    archive.write_bytes(pack(class_images(1)))
    code = (
        "import sys; sys.modules['PIL'] = None\n"
        "from cdml_edge import LiveBatchLoader, watch_and_pack, watch_in_memory\n"
        "import cdml_edge.agent.app, cdml_edge.model.spec, cdml_edge.live\n"
        f"live = LiveBatchLoader({str(archive)!r})\n"
        "assert [a.shape for a in live.get_images(as_pil=False)] == [(32, 48, 3)] * 3\n"
        "assert len(live.get_all(as_pil=False)['images']) == 3\n"
        "try:\n"
        "    live.get_images()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "get_images() gives PIL images and needs Pillow: pip install 'cdml-edge[full]',"
        " or get_images(as_pil=False) for uint8 arrays"
    ]


def test_json_records_and_flattening() -> None:
    data = pack(
        [
            ("a.json", json.dumps([{"id": 1, "s": {"t": 36}}, {"id": 2, "s": {"t": 37}}]).encode()),
            ("b.json", json.dumps({"sensor": {"gps": {"lat": 28.6}, "temp": 36}}).encode()),
            ("c.json", b"7"),
        ]
    )
    live = LiveBatchLoader(data)
    assert live.get_json() == [
        {"id": 1, "s": {"t": 36}},
        {"id": 2, "s": {"t": 37}},
        {"sensor": {"gps": {"lat": 28.6}, "temp": 36}},
        {"value": 7},
    ]
    assert live.get_json(flatten=True)[:3] == [
        {"id": 1, "s.t": 36},
        {"id": 2, "s.t": 37},
        {"sensor.gps.lat": 28.6, "sensor.temp": 36},
    ]


def test_a_window_manifest_is_not_a_member() -> None:
    data = pack([("a.txt", b"one two\n\n three \n")], manifest={"window_id": "w-1"})
    live = LiveBatchLoader(data)
    assert live.names == ["a.txt"] and live.manifest is not None
    assert live.manifest["window_id"] == "w-1"
    assert live.get_json() == [] and live.summary()["manifest_present"] is True
    assert live.get_text()[0]["lines"] == ["one two", "three"]
    assert live.get_text(clean=False)[0]["lines"] == ["one two", "", " three "]
