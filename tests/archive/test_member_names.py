"""Member names in normal form: ``./cls/a.png`` and ``cls//a.png`` are ``cls/a.png``.

The same for every reader (ZIP, tar, tar.zst; C core and Python) and for labels, include
filters, scan and export alike.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.archives import raw_zip
from typer.testing import CliRunner

from cdml_edge.archive import open_archive, pack
from cdml_edge.cli import app

PNG = bytes(range(256)) * 4  # bytes only: the dataset below yields raw bytes


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        f"{cls}/{i}.png": PNG + cls.encode() + bytes([i])
        for cls in ("cat", "dog")
        for i in range(3)
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("./cat/1.png", "cat/1.png"),
        ("././cat//1.png", "cat/1.png"),
        ("cat/./1.png", "cat/1.png"),
        ("a//b//c", "a/b/c"),
        ("./cat/", "cat/"),  # a directory stays a directory
        ("./", "./"),  # nothing left: unchanged (a directory entry, left out)
        ("/./etc/passwd", "/etc/passwd"),  # absolute stays absolute (unsafe, visible)
        ("./../x", "../x"),  # .. is kept (unsafe, visible)
        ("plain.txt", "plain.txt"),
    ],
)
def test_normal_form(raw: str, normal: str) -> None:
    from cdml_edge.archive.names import normalize_member_name

    assert normalize_member_name(raw) == normal


def test_normal_names_are_not_copied() -> None:
    from cdml_edge.archive.names import normalize_member_names

    names = ["a/b.png", "c.txt", "d/.hidden", "e/..f", "._mac", "dir/", "x/y/"]
    assert normalize_member_names(names) is names  # dot files and directories are normal
    assert normalize_member_names(["./a", "b"]) == ["a", "b"]
    assert normalize_member_names(["a/.", "/abs//x", "b"]) == ["a", "/abs/x", "b"]


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("kind", ["tar --zstd", "tar", "seekable tar.zst", "zip"])
def test_every_reader_serves_normal_names(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "tree"
    files = _tree(src)
    out = tmp_path / "x.bin"
    if kind.startswith("tar"):  # the most common way: tar -cf x -C folder .
        flags = ["--zstd"] if kind == "tar --zstd" else []
        subprocess.run(["tar", *flags, "-cf", str(out), "-C", str(src), "."], check=True)
        listed = subprocess.run(["tar", "-tf", str(out)], capture_output=True, text=True)
        assert "./cat/0.png" in listed.stdout.split()  # stored with ./
    elif kind == "seekable tar.zst":
        out.write_bytes(pack([(f"./{n}", d) for n, d in files.items()], format="tar.zst"))
    else:
        out.write_bytes(
            raw_zip([(f"./{n}".replace("/", "//", 1).encode(), d, 8) for n, d in files.items()])
        )
    arc = open_archive(out)
    assert sorted(arc.names()) == sorted(files)
    for name, data in files.items():
        assert arc.read(name) == data
        assert arc.info(name).name == name
        assert f"./{name}" in arc  # the stored spelling still finds the member
    assert dict(arc) == files
    assert arc.read_many(sorted(files)) == [files[n] for n in sorted(files)]


@pytest.mark.usefixtures("engine")
def test_two_spellings_of_one_name_are_a_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "dup.zip"
    path.write_bytes(
        raw_zip([(b"./a.txt", b"first", 0), (b"b.txt", b"b", 0), (b"a.txt", b"second", 0)])
    )
    arc = open_archive(path)
    assert arc.names() == ["a.txt", "b.txt"] and arc.read("a.txt") == b"second"
    res = CliRunner().invoke(app, ["scan", str(path)])
    assert res.exit_code == 1 and "corrupt: a.txt: duplicate member name" in res.output


def test_class_folders_of_a_tar_zst_packed_with_dot(tmp_path: Path) -> None:
    """The issue's case: ``tar --zstd -cf x.tar.zst -C folder .`` then labels="folder"."""
    from cdml_edge import CDMLStreamDataset

    src = tmp_path / "tree"
    files = _tree(src)
    out = tmp_path / "pets.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
    ds = CDMLStreamDataset(out, labels="folder")
    assert ds.classes == ["cat", "dog"] and len(ds) == 6
    assert sorted(ds.names) == sorted(files)
    assert {ds.classes[y] for x, y in (ds[i] for i in range(len(ds)))} == {"cat", "dog"}


def test_include_patterns_and_label_keys_match_in_normal_form(tmp_path: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    src = tmp_path / "tree"
    _tree(src)
    out = tmp_path / "pets.tar"
    subprocess.run(["tar", "-cf", str(out), "-C", str(src), "."], check=True)
    labels = {"./cat/0.png": "a", "cat/1.png": "b", "./cat//2.png": "a"}
    only = CDMLStreamDataset(out, include="./cat/*", labels=labels)
    assert sorted(only.names) == ["cat/0.png", "cat/1.png", "cat/2.png"]
    assert only.classes == ["a", "b"]


def test_scan_lists_normal_names(tmp_path: Path) -> None:
    src = tmp_path / "tree"
    _tree(src)
    out = tmp_path / "pets.tar.zst"
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(src), "."], check=True)
    res = CliRunner().invoke(app, ["scan", str(out)])
    assert res.exit_code == 0, res.output
    assert " cat/0.png" in res.output and "./cat" not in res.output


def test_export_relabels_and_filters_match_normal_names(tmp_path: Path) -> None:
    from cdml_edge.retrain.filters import parse_filter
    from cdml_edge.retrain.relabels import load_relabels

    csv = tmp_path / "relabels.csv"
    csv.write_text("name,label\n./frame_1.png,scratch\nsub//frame_2.png,ok\n")
    relabels = load_relabels(csv)
    assert relabels.by_name == {"frame_1.png": "scratch", "sub/frame_2.png": "ok"}
    assert parse_filter("name=./frame_1.png")({"name": "frame_1.png"})
