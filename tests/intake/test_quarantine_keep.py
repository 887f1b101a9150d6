"""``keep`` means keep: what quarantine may not hold is left in place, and said so.

Real files on real file systems: the working folder (ext4 here) and, for a move across file
systems, a tmpfs (``/dev/shm``) where there is one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdml_edge.fsio import block_size
from cdml_edge.intake.finishing import FileLifecycle, move_file

OLD = 1_000_000_000  # an mtime from 2001


def _file(path: Path, size: int, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_a_file_larger_than_the_quarantine_bound_is_left_in_place(tmp_path: Path) -> None:
    lc = FileLifecycle(tmp_path / "quarantine", 20_000)  # three files of a block each fit
    earlier = [
        lc.quarantine("cam", f"e{i}.jpg", _file(tmp_path / "in" / f"e{i}.jpg", 1000))
        for i in range(3)
    ]
    assert all(p is not None and p.exists() for p in earlier)
    big = _file(tmp_path / "in" / "big.jpg", 40_000)
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    assert lc.quarantine("cam", "big.jpg", big) is None
    assert big.exists() and hashlib.sha256(big.read_bytes()).hexdigest() == digest  # kept
    assert all(p is not None and p.exists() for p in earlier)  # nothing evicted for it
    dest, why = lc.quarantine_or_leave("cam", "big.jpg", big)
    assert dest is None and why is not None
    assert "left in place" in why and "40000 bytes" in why and "20000" in why
    assert lc.left_in_place == 2 and big.exists()


def test_the_path_returned_is_there_even_for_a_file_with_an_old_mtime(tmp_path: Path) -> None:
    """The bound evicts by quarantine time, never the file just quarantined."""
    lc = FileLifecycle(tmp_path / "quarantine", block_size(tmp_path) * 5 // 2)  # two files fit
    first = lc.quarantine("cam", "a.jpg", _file(tmp_path / "in" / "a.jpg", 1000))
    second = lc.quarantine("cam", "b.jpg", _file(tmp_path / "in" / "b.jpg", 1000))
    third = lc.quarantine("cam", "old.jpg", _file(tmp_path / "in" / "old.jpg", 1000, mtime=OLD))
    assert third is not None and third.exists()  # the event names a file that is there
    assert first is not None and not first.exists()  # the earliest quarantined went
    assert second is not None and second.exists()


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system (tmpfs /dev/shm) here")
    d = Path(tempfile.mkdtemp(prefix="cdml-q-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_sparse_file_moved_across_file_systems_stays_sparse(
    tmp_path: Path, other_fs: Path
) -> None:
    src = tmp_path / "in" / "sparse.raw"
    src.parent.mkdir()
    size = 256 * 1024**2
    with open(src, "wb") as fh:
        fh.write(b"head" * 1024)
        fh.seek(size // 2)
        fh.write(b"middle" * 1024)
        fh.truncate(size)
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    dest = move_file(src, other_fs / "q")
    assert not src.exists()
    st = os.stat(dest)
    assert st.st_size == size
    assert st.st_blocks * 512 < 4 * 1024**2, st.st_blocks  # holes kept, not written out
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == want


def test_a_regular_file_moved_across_file_systems_is_copied_whole(
    tmp_path: Path, other_fs: Path
) -> None:
    src = _file(tmp_path / "in" / "a.jpg", 300_000, mtime=OLD)
    want = src.read_bytes()
    dest = move_file(src, other_fs / "q")
    assert dest.read_bytes() == want and not src.exists()
    assert os.stat(dest).st_mtime == OLD


def test_a_source_quarantine_folder_that_is_a_link_is_never_moved_into(tmp_path: Path) -> None:
    """``quarantine/<source> -> elsewhere/``: the bad file stays, nothing lands elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    old = _file(elsewhere / "precious.bin", 5000, mtime=OLD)
    (tmp_path / "quarantine").mkdir()
    (tmp_path / "quarantine" / "cam").symlink_to(elsewhere, target_is_directory=True)
    lc = FileLifecycle(tmp_path / "quarantine", 4000)
    bad = _file(tmp_path / "in" / "bad.jpg", 100)
    try:
        assert lc.quarantine("cam", "bad.jpg", bad) is None
    finally:
        lc.close()
    assert bad.exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.bin"] and old.exists()


def test_the_quarantine_bound_counts_the_disk_space_of_small_files(tmp_path: Path) -> None:
    """Forty 100-byte files are 4 KB by length but 40 blocks on disk: the bound holds on disk."""
    bound = 32 * 1024
    lc = FileLifecycle(tmp_path / "quarantine", bound)
    for i in range(40):
        assert lc.quarantine("cam", f"s{i}.jpg", _file(tmp_path / "in" / f"s{i}.jpg", 100))
    used = sum(p.lstat().st_blocks * 512 for p in (tmp_path / "quarantine").rglob("*.jpg"))
    assert 0 < used <= bound


def test_a_file_whose_blocks_exceed_the_quarantine_bound_is_left_in_place(tmp_path: Path) -> None:
    """Its length fits the bound, its whole blocks do not: it would hold the folder above it."""
    (tmp_path / "quarantine").mkdir()
    block = block_size(tmp_path / "quarantine")
    lc = FileLifecycle(tmp_path / "quarantine", block + 100)
    f = _file(tmp_path / "in" / "f.jpg", block + 50)  # two blocks on the disk
    dest, why = lc.quarantine_or_leave("cam", "f.jpg", f)
    assert dest is None and f.exists()
    assert why is not None and "left in place" in why and f"{2 * block} " in why
    assert lc.quarantine("cam", "g.jpg", None, os.urandom(block + 50)) is None
    used = sum(p.lstat().st_blocks * 512 for p in (tmp_path / "quarantine").rglob("*"))
    assert used <= block + 100
