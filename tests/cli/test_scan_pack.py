"""``cdml-edge scan`` and ``cdml-edge pack`` through the real command line app."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases as tc
from helpers.archives import raw_zip
from typer.testing import CliRunner

from cdml_edge.archive import open_archive, pack
from cdml_edge.cli import app

runner = CliRunner()


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    (src / "cam1").mkdir(parents=True)
    for i in range(15):
        (src / "cam1" / f"{i:03d}.csv").write_bytes(b"t,v\n%d,1\n" % i * 50)
    (src / "img.jpg").write_bytes(bytes(range(256)) * 20)
    return src


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("suffix", [".zip", ".tar.zst"])
def test_pack_then_scan(tmp_path: Path, suffix: str) -> None:
    src = _tree(tmp_path)
    out = tmp_path / f"o{suffix}"
    res = runner.invoke(app, ["pack", str(src), str(out)])
    assert res.exit_code == 0, res.output
    arc = open_archive(out)
    assert sorted(arc.names()) == sorted(
        p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()
    )
    assert arc.read("cam1/003.csv") == (src / "cam1" / "003.csv").read_bytes()
    res = runner.invoke(app, ["scan", str(out)])
    assert res.exit_code == 0, res.output
    assert "16 members" in res.output and "all checksums OK" in res.output
    assert "cam1/014.csv" in res.output and ("zip" if suffix == ".zip" else "tar.zst") in res.output
    if suffix == ".zip":
        assert subprocess.run(["unzip", "-tq", str(out)], capture_output=True).returncode == 0


@pytest.mark.usefixtures("engine")
def test_scan_names_corrupt_members(tmp_path: Path) -> None:
    data = bytearray(raw_zip([(b"good.txt", b"fine" * 10, 8), (b"broken.csv", b"1,2,3\n" * 99, 8)]))
    pos = data.index(b"broken.csv") + 14
    data[pos] ^= 0x20
    path = tmp_path / "bad.zip"
    path.write_bytes(bytes(data))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 1
    assert "broken.csv" in res.output and "corrupt" in res.output
    assert "good.txt" in res.output and "all checksums OK" not in res.output


@pytest.mark.usefixtures("engine")
def test_scan_flags_unsafe_names(tmp_path: Path) -> None:
    path = tmp_path / "evil.zip"
    path.write_bytes(raw_zip([(b"../../etc/cron.d/x", b"boom", 0), (b"ok.txt", b"ok", 0)]))
    res = runner.invoke(app, ["scan", "--summary", str(path)])
    assert res.exit_code == 1
    assert "unsafe name: ../../etc/cron.d/x" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_names_duplicate_members(tmp_path: Path) -> None:
    path = tmp_path / "dups.zip"
    members = [(b"m%d" % i, b"x", 0) for i in range(5)] + [(b"m3", b"again", 0)]
    path.write_bytes(raw_zip(members))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 1
    assert "corrupt: m3: duplicate member name" in res.output
    assert "m2: duplicate" not in res.output


def test_scan_unreadable_archive(tmp_path: Path) -> None:
    path = tmp_path / "junk.zip"
    path.write_bytes(b"this is not an archive" * 30)
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 1 and "junk.zip" in res.output
    cut = tmp_path / "cut.tar.zst"
    cut.write_bytes(pack([("a", b"x" * 5000)], format="tar.zst")[:40])
    res = runner.invoke(app, ["scan", str(cut)])
    assert res.exit_code == 1 and "cut.tar.zst" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_shows_a_nul_in_a_name_escaped_and_unsafe(tmp_path: Path) -> None:
    path = tmp_path / "nul.zip"
    path.write_bytes(raw_zip([(b"a\x00.exe", b"hi", 0), (b"ok.txt", b"ok", 0)]))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 1 and "\x00" not in res.output
    assert "a\\x00.exe UNSAFE" in res.output
    assert "unsafe name: a\\x00.exe: NUL in the name (C-string readers see 'a')" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_names_skipped_links_and_duplicate_tar_names(tmp_path: Path) -> None:
    links = tmp_path / "links.tar"
    links.write_bytes(tc.links_and_devices())
    res = runner.invoke(app, ["scan", str(links)])
    assert res.exit_code == 0, res.output
    assert "skipped (not a file): data/link: symbolic link to 'a.txt'" in res.output
    assert "skipped (not a file): dev/null: character device" in res.output
    dups = tmp_path / "dups.tar"
    dups.write_bytes(tc.duplicate_names())
    res = runner.invoke(app, ["scan", str(dups)])
    assert res.exit_code == 1
    assert "corrupt: a.txt: duplicate member name" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_reads_sparse_members_and_refuses_unknown_ones_by_name(tmp_path: Path) -> None:
    path = tmp_path / "sparse.tar"
    path.write_bytes(tc.pax_sparse("1.0"))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 0, res.output
    assert f"{tc.SPARSE_SIZE:>12}" in res.output and "GNUSparseFile" not in res.output
    path.write_bytes(tc.pax_sparse("2.0"))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 1
    assert "sparse.bin REFUSED" in res.output
    assert "refused: sparse.bin: GNU sparse file of format pax 2.0" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_damaged_input_without_members_fails(tmp_path: Path) -> None:
    cases = {
        "nothing.tar.zst": zstandard.ZstdCompressor().compress(b""),
        "zero-frames.tar.zst": tc.seek_table([]),
        "dangling.tar": tc.dangling_long_name(),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        res = runner.invoke(app, ["scan", str(tmp_path / name)])
        assert res.exit_code == 1, (name, res.output)
        assert "0 members" not in res.output and name in res.output
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()  # empty but well formed
    (tmp_path / "empty.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(empty.getvalue()))
    res = runner.invoke(app, ["scan", str(tmp_path / "empty.tar.zst")])
    assert res.exit_code == 0 and "0 members" in res.output


@pytest.mark.usefixtures("engine")
def test_scan_notes_a_seek_table_it_did_not_use(tmp_path: Path) -> None:
    stream, members = tc.member_stream()
    path = tmp_path / "extra.tar.zst"
    path.write_bytes(tc.seekable_tar_zst(stream, edit="extra"))
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 0, res.output
    assert f"{len(members)} members" in res.output
    assert "note: the seek table does not match the frames of the stream" in res.output


def _odd_tree(tmp_path: Path) -> Path:
    src = tmp_path / "odd"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "b.txt").write_bytes(b"b" * 40)
    (src / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name")  # not UTF-8
    os.mkfifo(src / "pipe")
    (src / "passwd").symlink_to("/etc/passwd")
    (src / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    return src


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("suffix", [".zip", ".tar.zst"])
def test_pack_names_stay_utf8_and_skips_are_said(tmp_path: Path, suffix: str) -> None:
    """A name that is not UTF-8 made a ZIP that stdlib ``zipfile`` could not open at all.

    It is packed as ``%XX`` (as the agent names such members); links and FIFOs are skipped
    aloud, not in silence, and never followed.
    """
    src = _odd_tree(tmp_path)
    out = tmp_path / f"o{suffix}"
    res = runner.invoke(app, ["pack", str(src), str(out)])
    assert res.exit_code == 0, res.output
    names = sorted(open_archive(out).names())
    assert names == ["caf%E9.txt", "sub/b.txt"]
    assert open_archive(out).read("caf%E9.txt") == b"latin-1 name"
    for what in ("elsewhere: a symbolic link", "passwd: a symbolic link", "pipe: a FIFO"):
        assert f"skipped (not a regular file): {what}" in res.output, res.output
    if suffix == ".zip":
        import zipfile

        assert sorted(zipfile.ZipFile(out).namelist()) == names
        assert subprocess.run(["unzip", "-tq", str(out)], capture_output=True).returncode == 0


@pytest.mark.usefixtures("engine")
def test_pack_into_a_missing_folder_names_it(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    res = runner.invoke(app, ["pack", str(src), str(tmp_path / "nowhere" / "o.zip")])
    assert res.exit_code == 2
    assert "nowhere" in res.output and ".part" not in res.output, res.output


def test_the_zip_writer_flags_only_utf8_names_as_utf8(tmp_path: Path) -> None:
    """A raw name that is not UTF-8 must not carry the UTF-8 flag (readers refuse it)."""
    import zipfile

    out = tmp_path / "raw.zip"
    out.write_bytes(pack([(os.fsdecode(b"r\xe9sum\xe9.txt"), b"x"), ("na\u00efve.txt", b"y")]))
    with zipfile.ZipFile(out) as zf:
        infos = {i.filename: i.flag_bits & 0x800 for i in zf.infolist()}
    assert infos["na\u00efve.txt"] == 0x800
    assert [flag for name, flag in infos.items() if name != "na\u00efve.txt"] == [0]
