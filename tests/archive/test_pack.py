"""Writing archives: atomic writes, manifests, unsafe names; is_safe_member_name."""

from __future__ import annotations

import io
import json
import os
import random
import stat
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest

from cdml_edge import synth
from cdml_edge.archive import (
    ArchiveError,
    UnsafeMemberError,
    UnsupportedArchiveError,
    is_safe_member_name,
    open_archive,
    pack,
    write_archive,
)


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("a.txt", True),
        ("dir/sub/file.bin", True),
        ("..hidden/ok", True),
        ("a/../b", False),
        ("../escape", False),
        ("/etc/passwd", False),
        ("C:/Windows/x", False),
        ("c:relative", False),
        ("dir\\..\\x", False),
        ("\\\\server\\share", False),
        ("nul\x00byte", False),
        ("", False),
    ],
)
def test_is_safe_member_name(name: str, safe: bool) -> None:
    assert is_safe_member_name(name) is safe


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_manifest_is_last_and_canonical(fmt: str) -> None:
    items = [("b.txt", b"bee"), ("a.txt", b"a")]
    data = pack(items, format=fmt, manifest={"window_id": "w-7", "source": "cam1"}, mtime=0)
    arc = open_archive(data)
    assert arc.names() == ["b.txt", "a.txt", "manifest.json"]
    raw = arc.read("manifest.json")
    doc = json.loads(raw)
    assert doc["window_id"] == "w-7"
    assert [i["name"] for i in doc["items"]] == ["b.txt", "a.txt"]
    assert doc["items"][0] == {"name": "b.txt", "size": 3, "crc32": f"{zlib.crc32(b'bee'):08x}"}
    assert raw == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    own = pack(items, format=fmt, manifest={"items": ["mine"]})
    assert json.loads(open_archive(own).read("manifest.json"))["items"] == ["mine"]


def test_deterministic_bytes() -> None:
    items = [("x.csv", b"1,2\n" * 100), ("y.png", b"\x89PNG" + bytes(300))]
    for fmt in ("zip", "tar.zst"):
        assert pack(items, format=fmt, mtime=1e9) == pack(items, format=fmt, mtime=1e9)


def test_refuses_unsafe_and_duplicate_names() -> None:
    with pytest.raises(UnsafeMemberError) as exc:
        pack([("../up.txt", b"x")])
    assert exc.value.member == "../up.txt"
    with pytest.raises(UnsafeMemberError):
        pack([("/abs", b"x")], format="tar.zst")
    with pytest.raises(ArchiveError, match="duplicate"):
        pack([("a", b"1"), ("a", b"2")])
    with pytest.raises(ArchiveError, match="duplicate"):
        pack([("manifest.json", b"{}")], manifest={})
    with pytest.raises(UnsupportedArchiveError):
        pack([("a", b"1")], format="rar")


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("suffix", [".zip", ".tar.zst"])
def test_write_archive_atomic(tmp_path: Path, suffix: str) -> None:
    items = [(f"f{i}.txt", b"%d" % i * 1000) for i in range(30)]
    target = tmp_path / f"out{suffix}"
    target.write_bytes(b"old contents")
    size = write_archive(target, items)
    assert size == target.stat().st_size
    assert os.listdir(tmp_path) == [target.name]  # no temporary file is left behind
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert dict(open_archive(target)) == dict(items)
    if suffix == ".zip":
        assert subprocess.run(["unzip", "-tq", str(target)], capture_output=True).returncode == 0
    else:
        listing = subprocess.run(
            f"zstd -dc '{target}' | tar -t", shell=True, check=True, capture_output=True, text=True
        ).stdout.split()
        assert listing == [n for n, _ in items]


def test_write_archive_failure_leaves_old_file(tmp_path: Path) -> None:
    target = tmp_path / "keep.zip"
    write_archive(target, [("a", b"1")])
    before = target.read_bytes()

    def broken():  # type: ignore[no-untyped-def]
        yield ("b", b"2")
        raise RuntimeError("source went away")

    with pytest.raises(RuntimeError):
        write_archive(target, broken())
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.zip"]
    with pytest.raises(UnsupportedArchiveError):
        write_archive(tmp_path / "x.rar", [("a", b"1")])


def test_zip_stores_compressed_types(tmp_path: Path) -> None:
    data = pack([("a.jpg", b"\xff\xd8" + bytes(5000)), ("b.txt", bytes(5000))])
    path = tmp_path / "c.zip"
    path.write_bytes(data)
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("a.jpg").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("b.txt").compress_type == zipfile.ZIP_DEFLATED
        assert zf.testzip() is None


def _noise(n: int, seed: int) -> bytes:
    """Bytes deflate cannot shrink by more than a few percent (PCM noise, encrypted data)."""
    return random.Random(seed).randbytes(n)


def test_zip_stores_a_member_its_first_kilobytes_show_incompressible() -> None:
    """A 1-s 16-kHz WAV of machine noise saves 2 % deflated, at 0.4 ms of CPU: stored.

    A compressible member of the same size is deflated whole, bytes intact.
    """
    wav = synth.machine_audio(1, seed=3)[0]
    assert len(zlib.compress(wav, 1)) > 0.95 * len(wav)  # what makes it not worth deflating
    text = (b"t,x,y,z\n" + b"".join(b"%d,%d,0,1\n" % (i, i * 7 % 100) for i in range(4000)))[
        : len(wav)
    ]
    data = pack([("m.wav", wav), ("v.csv", text), ("small.bin", _noise(900, 2))])
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.getinfo("m.wav").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("v.csv").compress_type == zipfile.ZIP_DEFLATED
        assert zf.getinfo("v.csv").compress_size < len(text) // 3
        assert zf.getinfo("small.bin").compress_type == zipfile.ZIP_STORED  # did not shrink
        assert zf.read("m.wav") == wav and zf.read("v.csv") == text and zf.testzip() is None


def test_zip_deflates_a_member_whose_first_kilobytes_compress() -> None:
    """The probe decides by the member's start: noise after a compressible start is deflated."""
    half = (b"abcdefgh" * 4096) + _noise(16_000, 3)
    data = pack([("a.dat", half)])
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.getinfo("a.dat").compress_type == zipfile.ZIP_DEFLATED
        assert zf.read("a.dat") == half


def test_zip_deflates_a_member_with_a_noisy_head_and_a_compressible_body() -> None:
    """A random 4-KiB header before 1 MiB of zeros is judged by a sample of its middle too."""
    data = _noise(4096, 0) + bytes(1 << 20)
    with zipfile.ZipFile(io.BytesIO(pack([("x.bin", data)], level=6))) as zf:
        info = zf.getinfo("x.bin")
        assert info.compress_type == zipfile.ZIP_DEFLATED and info.compress_size < 8192
        assert zf.read("x.bin") == data
