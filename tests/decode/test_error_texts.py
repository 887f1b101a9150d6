"""Error texts name the file and never hold a Python object's repr (``<... object at 0x...>``).

Bad files of every modality go through the decoders and through ``cdml-edge test`` (the
error events it prints are the ones ``run`` publishes); every message is searched.
"""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cdml_edge import synth
from cdml_edge.cli import app
from cdml_edge.decode import DecodeError, decode

ROOT = Path(__file__).resolve().parents[2]
REPR = re.compile(r"object at 0x|<[\w.]+ object|<_io\.")


def _riff(fmt: bytes, data: bytes) -> bytes:
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data"
    body += struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


WAV = synth.wav_bytes(synth.machine_waveform(np.random.default_rng(0), False))
BAD: dict[str, list[tuple[str, bytes]]] = {
    "image": [
        ("empty.jpg", b""),
        ("text.jpg", b"not an image at all\n" * 10),
        ("truncated.jpg", b"\xff\xd8\xff\xe0" + b"\x00" * 40),
        ("header.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 30),
    ],
    "audio": [
        ("empty.wav", b""),
        ("bogus.wav", b"RIFF-but-not-really" * 20),
        ("truncated.wav", WAV[:30]),
        ("no-samples.wav", _riff(struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16), b"")),
        ("odd-format.wav", _riff(struct.pack("<HHIIHH", 99, 1, 16000, 32000, 2, 16), b"\0" * 64)),
    ],
    "timeseries": [
        ("empty.csv", b""),
        ("binary.csv", bytes(range(256)) * 4),
        ("words.csv", b"a,b\nx,y\nz,w\n"),
        ("ragged.csv", b"a,b,c\n1,2\n3,4,5,6\n"),
    ],
    "json": [("bad.json", b"{not json"), ("binary.json", b"\xff\xfe\x00")],
    "text": [("latin1.txt", "caf\xe9".encode("latin-1"))],
}
CASES = [(m, name, data) for m, files in BAD.items() for name, data in files]


@pytest.mark.parametrize(("modality", "name", "data"), CASES, ids=[c[1] for c in CASES])
def test_decoder_errors_name_the_file_and_hold_no_repr(
    modality: str, name: str, data: bytes
) -> None:
    try:
        decode(data, f"cam1/{name}", modality)
    except DecodeError as exc:
        assert f"cam1/{name}" in str(exc)
        assert not REPR.search(str(exc)), str(exc)
    # some of these decode (a CSV of words is a table); a decoded one has no message to check


def test_error_events_of_cdml_edge_test_hold_no_repr(tmp_path: Path) -> None:
    """Every bad file through ``cdml-edge test``: each is an error event naming it, no repr."""
    shutil.copytree(ROOT / "models", tmp_path / "models")
    (tmp_path / "factory.yaml").write_text(
        "sources:\n"
        "  - {name: cam, kind: folder, path: in/cam, modality: image}\n"
        "  - {name: mic, kind: folder, path: in/mic, modality: audio}\n"
        "  - {name: vib, kind: folder, path: in/vib, modality: timeseries}\n"
        "models:\n"
        "  image: {path: models/digits.onnx}\n"
        "  audio: {path: models/audio_anomaly.onnx}\n"
        "  timeseries: {path: models/vibration_anomaly.onnx}\n"
    )
    for source, modality in (("cam", "image"), ("mic", "audio"), ("vib", "timeseries")):
        folder = tmp_path / "in" / source
        folder.mkdir(parents=True)
        paths = []
        for name, data in BAD[modality]:
            (folder / name).write_bytes(data)
            paths.append(str(folder / name))
        r = CliRunner().invoke(
            app, ["test", "--config", str(tmp_path / "factory.yaml"), "--source", source, *paths]
        )
        assert r.exit_code in (0, 1), r.output
        assert not REPR.search(r.output), r.output
        assert "Traceback" not in r.output
        for name, _ in BAD[modality]:
            assert name in r.stdout, (name, r.stdout)
