"""``cdml-edge export`` as a user meets it: odd option values, the debris of a killed run.

* ``--split nan/1`` passed the check that the parts add up to 1 (a NaN compares false
  to everything) and put every item in ``val/``, leaving ``train/`` empty.
* ``--level 99`` (the help says zstd 1-22) was taken as it was: the windows were read,
  then writing the ``.tar.zst`` ended in a ``ValueError`` traceback (exit 1).
* An export killed while writing (``kill -9``, the OOM killer: it holds the selection,
  up to 2 GiB, in memory; a power cut) leaves its staging folder beside ``OUT``
  (``.tmp-*.stage``, hidden) holding the partial archive; the next export wrote its own
  and left that one there, so each killed run kept up to a whole export's bytes on the
  destination disk.
* Items of a damaged window archive were counted as ``corrupt``, the window not named.
* A relabel CSV giving one item two labels: the last row won, silently; ``/dev/zero``
  as the CSV was read until memory ran out.
* ``OUT`` naming a window archive of the ring (``ring/<Tab>``) replaced that retained
  window with the export.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from helpers.retention_data import make_window
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.retrain.errors import ExportError
from cdml_edge.retrain.layout import parse_split
from cdml_edge.store.retention import RetentionRing

T0 = 1_790_000_000.0


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile") / "ring"
    rnd = random.Random(3)
    store = RetentionRing(folder, max_bytes=10**9, fsync=False)
    for w in range(3):
        files = [(f"f{w}_{i}.png", rnd.randbytes(2000)) for i in range(6)]
        data, manifest = make_window(f"cam1-w{w:03d}", T0 + 10 * w, files, labels=["ok", "bad"] * 3)
        assert store.store(data, manifest).stored
    store.close()
    return folder


@pytest.mark.parametrize("text", ["nan/1", "0.5/nan", "nan/nan/nan", "1/nan/0", "NaN/100"])
def test_split_with_nan_is_refused(text: str) -> None:
    with pytest.raises(ExportError, match="--split"):
        parts = parse_split(text)
        raise AssertionError(f"--split {text!r} taken as {parts}")


def test_split_nan_on_the_command_line_is_a_usage_error(ring: Path, tmp_path: Path) -> None:
    out = tmp_path / "train.zip"
    r = CliRunner().invoke(app, ["export", str(ring), str(out), "--split", "nan/1", "-q"])
    assert r.exit_code == 2, r.output
    assert "--split" in r.output and not out.exists()


@pytest.mark.parametrize(
    ("name", "level"),
    [("train.tar.zst", "99"), ("train.tar.zst", "0"), ("train.zip", "10"), ("train.zip", "-1")],
)
def test_level_outside_the_range_is_a_usage_error(
    ring: Path, tmp_path: Path, name: str, level: str
) -> None:
    out = tmp_path / name
    r = CliRunner().invoke(app, ["export", str(ring), str(out), "--level", level, "-q"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "--level" in r.output and not out.exists()


def test_levels_at_the_ends_of_the_range_are_taken(ring: Path, tmp_path: Path) -> None:
    for name, level in [("a.zip", "1"), ("b.zip", "9"), ("c.tar.zst", "1"), ("d.tar.zst", "22")]:
        r = CliRunner().invoke(
            app, ["export", str(ring), str(tmp_path / name), "-q", "--level", level]
        )
        assert r.exit_code == 0, r.output
        assert (tmp_path / name).is_file()


def _debris(folder: Path, tag: str, age: float, part: str = ".tmp-k3v9x2qa.part") -> Path:
    """A staging folder as a killed export leaves it: mode 0700, a partial archive inside."""
    stage = folder / f".tmp-{tag}.stage"
    stage.mkdir(mode=0o700)
    (stage / part).write_bytes(b"PK\x03\x04" + bytes(1 << 20))
    then = time.time() - age
    for path in (stage / part, stage):
        os.utime(path, (then, then))
    return stage


def test_debris_of_a_killed_export_is_removed_by_the_next(ring: Path, tmp_path: Path) -> None:
    dest = tmp_path / "exports"
    dest.mkdir()
    killed = _debris(dest, "a1b2c3d4", age=3600)
    finished = _debris(dest, "e5f6g7h8", age=7200, part="train.zip")  # killed before its rename
    r = CliRunner().invoke(app, ["export", str(ring), str(dest / "train.zip"), "-q"])
    assert r.exit_code == 0, r.output
    assert not killed.exists() and not finished.exists(), sorted(os.listdir(dest))
    assert sorted(os.listdir(dest)) == ["train.zip"]


def test_a_stage_being_written_or_not_ours_is_left_alone(ring: Path, tmp_path: Path) -> None:
    dest = tmp_path / "exports"
    dest.mkdir()
    writing = _debris(dest, "live0001", age=1)  # another export writing now
    other = _debris(dest, "nest0001", age=3600)  # not what a writer leaves: a folder inside
    (other / "sub").mkdir()
    os.utime(other, (time.time() - 3600,) * 2)
    notes = dest / ".tmp-notes.stage"  # not a name the writer makes
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    os.utime(notes / "keep.txt", (time.time() - 3600,) * 2)
    r = CliRunner().invoke(app, ["export", str(ring), str(dest / "train.zip"), "-q"])
    assert r.exit_code == 0, r.output
    assert writing.exists() and other.exists() and (notes / "keep.txt").exists()


def _ring_copy(ring: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ring"
    copy.mkdir()
    for f in ring.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    return copy


@pytest.mark.parametrize("damage", ["truncated", "zeroed"])
def test_a_damaged_window_archive_is_named(ring: Path, tmp_path: Path, damage: str) -> None:
    # replay names each corrupt window; export only counted its items, so nobody could
    # tell which of thousands of windows to look at
    copy = _ring_copy(ring, tmp_path)
    archive = sorted(copy.glob("*_cam1-w001.zip"))[0]
    size = archive.stat().st_size
    if damage == "truncated":  # a copy cut short
        archive.write_bytes(archive.read_bytes()[: size // 2])
    else:  # the same length, its bytes gone (a bad card block)
        archive.write_bytes(bytes(size))
    r = CliRunner().invoke(app, ["export", str(copy), str(tmp_path / "train.zip"), "-q"])
    assert r.exit_code == 0, r.output
    assert '"corrupt": 6' in r.output, r.output
    named = [line for line in r.output.splitlines() if "cam1-w001" in line]
    assert named and "6 of 6 items corrupt" in named[0], r.output
    assert "cam1-w000" not in r.output and "cam1-w002" not in r.output


def _first_ids(ring: Path, n: int) -> list[str]:
    from cdml_edge.store.sidecar import read_sidecar

    sidecar = sorted(ring.glob("*_cam1-w000.window.json"))[0]
    return [it.id for it in read_sidecar(sidecar).manifest.items[:n]]


def test_two_labels_for_one_item_are_refused(ring: Path, tmp_path: Path) -> None:
    # two annotators' sheets pasted together: the last row won, silently
    a, b = _first_ids(ring, 2)
    csv = tmp_path / "relabels.csv"
    csv.write_text(f"id,label\n{a},scratch\n{b},ok\n{a},dent\n")
    out = tmp_path / "train.zip"
    r = CliRunner().invoke(app, ["export", str(ring), str(out), "--labels", str(csv), "-q"])
    assert r.exit_code == 2, r.output
    assert "row 4" in r.output and "row 2" in r.output and "dent" in r.output, r.output
    assert not out.exists()


def test_the_same_label_twice_is_taken(ring: Path, tmp_path: Path) -> None:
    a, _ = _first_ids(ring, 2)
    csv = tmp_path / "relabels.csv"
    csv.write_text(f"id,label\n{a},scratch\n{a},scratch\n")
    r = CliRunner().invoke(
        app, ["export", str(ring), str(tmp_path / "t.zip"), "--labels", str(csv), "-q"]
    )
    assert r.exit_code == 0, r.output
    assert '"scratch": 1' in r.output and '"relabelled": 1' in r.output, r.output


def test_a_device_as_the_relabel_csv_is_refused(ring: Path, tmp_path: Path) -> None:
    # /dev/zero was read to the end of memory
    out = tmp_path / "train.zip"
    r = CliRunner().invoke(app, ["export", str(ring), str(out), "--labels", "/dev/zero", "-q"])
    assert r.exit_code == 2, r.output
    assert "/dev/zero" in r.output and not out.exists()


@pytest.mark.parametrize("which", ["first", "last"])
def test_export_over_a_file_of_the_ring_is_refused(ring: Path, tmp_path: Path, which: str) -> None:
    # a tab completion too far: the retained window (or the catalog) was replaced by the
    # training archive, and the window read as corrupt from then on
    copy = _ring_copy(ring, tmp_path)
    if which == "first":
        target = sorted(copy.glob("*_cam1-w000.zip"))[0]
    else:
        target = sorted(copy.glob("*_cam1-w002.zip"))[0]
    before = target.read_bytes()
    r = CliRunner().invoke(app, ["export", str(copy), str(target), "-q"])
    assert r.exit_code == 2, r.output
    assert target.name in r.output and "retention" in r.output, r.output
    assert target.read_bytes() == before


def test_export_beside_the_ring_files_is_taken(ring: Path, tmp_path: Path) -> None:
    copy = _ring_copy(ring, tmp_path)
    r = CliRunner().invoke(app, ["export", str(copy), str(copy / "train.zip"), "-q"])
    assert r.exit_code == 0, r.output
