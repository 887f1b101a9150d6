"""fsio: atomic replacement, unique names that fit the file system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdml_edge.fsio import (
    NAME_MAX,
    atomic_write,
    atomic_writer,
    display_name,
    fit_name,
    log_name,
    unique_name,
)
from cdml_edge.fsio.space import DEFAULT_BLOCK, MAX_BLOCK, block_size, on_disk


def test_atomic_write_replaces_whole_file_with_mode(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    assert atomic_write(target, b"new bytes", mode=0o600) == 9
    assert target.read_bytes() == b"new bytes"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["a.bin"]


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write(b"half")
        raise RuntimeError("disk went away")
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["a.bin"]


def test_unique_name_counts_up_and_keeps_extension(tmp_path: Path) -> None:
    (tmp_path / "f.png").write_bytes(b"")
    (tmp_path / "f.1.png").write_bytes(b"")
    assert unique_name(tmp_path, "f.png").name == "f.2.png"
    assert unique_name(tmp_path, "g").name == "g"


def test_too_long_names_are_shortened_and_still_unique(tmp_path: Path) -> None:
    name = "é" * 200 + ".png"  # 404 bytes in UTF-8
    first = unique_name(tmp_path, name)
    assert len(first.name.encode()) <= NAME_MAX and first.name.endswith(".png")
    first.write_bytes(b"")
    second = unique_name(tmp_path, name)
    assert second != first and len(second.name.encode()) <= NAME_MAX
    second.write_bytes(b"")  # the file system accepts both
    assert fit_name("short.txt") == "short.txt"


def test_unique_name_keeps_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    name = os.fsdecode(b"\xff" * 300 + b".csv")
    first = unique_name(tmp_path, name)
    assert os.fsencode(first.name) == b"\xff" * 251 + b".csv"
    first.write_bytes(b"")
    second = unique_name(tmp_path, name)
    assert os.fsencode(second.name) == b"\xff" * 249 + b".1.csv"


def test_names_are_shown_as_utf8_and_logged_without_control_characters() -> None:
    raw = os.fsdecode(b"cam\xff\xfe-\x1b[2J\r\n\xe2\x80\xaeevil%41.jpg")
    shown = display_name(raw)
    assert shown == "cam%FF%FE-\x1b[2J\r\n\u202eevil%41.jpg"  # valid UTF-8, % left as is
    shown.encode("utf-8")
    assert display_name("plain é.jpg") == "plain é.jpg"
    assert log_name(raw) == "cam%FF%FE-\\x1b[2J\\r\\n\\u202eevil%41.jpg"
    assert log_name(Path("/a/b\tc")) == "/a/b\\tc"


def test_on_disk_rounds_up_to_whole_blocks() -> None:
    assert [on_disk(n, 4096) for n in (0, 1, 4096, 4097)] == [0, 4096, 4096, 8192]


def test_block_size_is_what_a_small_file_takes(tmp_path: Path) -> None:
    block = block_size(tmp_path)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 100)
    assert small.stat().st_blocks * 512 <= on_disk(100, block)
    assert block_size(tmp_path / "missing" / "deeper") == block  # made later, on this disk


def test_a_folder_not_made_yet_has_the_block_of_its_parent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bound checked before its folder is made counts the blocks it will take there."""
    real = os.statvfs

    class Stat:
        f_frsize = f_bsize = 1024

    def statvfs(p: str) -> object:
        if not os.path.exists(p):
            raise FileNotFoundError(p)
        return Stat() if os.fspath(p) == os.fspath(tmp_path) else real(p)

    monkeypatch.setattr(os, "statvfs", statvfs)
    assert block_size(tmp_path / "quarantine" / "cam") == 1024

    def broken(p: str) -> object:
        raise PermissionError(p)

    monkeypatch.setattr(os, "statvfs", broken)
    assert block_size(tmp_path) == DEFAULT_BLOCK


def test_a_network_file_system_block_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """NFS reports its transfer size (1 MiB) as its block: a window would count 2 MiB."""

    class Stat:
        f_frsize = f_bsize = 1 << 20

    monkeypatch.setattr(os, "statvfs", lambda _p: Stat())
    assert block_size("/anywhere") == MAX_BLOCK


@pytest.mark.parametrize(("umask", "want"), [(0o077, 0o600), (0o022, 0o644), (0o027, 0o640)])
def test_umask_mode_is_what_the_umask_gives_a_new_file(
    tmp_path: Path, umask: int, want: int
) -> None:
    """A user's output (``mode=UMASK``) follows the umask; the default mode does not."""
    from cdml_edge.fsio import UMASK, umask_mode

    old = os.umask(umask)
    try:
        assert umask_mode(tmp_path) == want
        assert os.umask(umask) == umask  # read without changing it
        atomic_write(tmp_path / "user.jsonl", b"{}\n", mode=UMASK)
        atomic_write(tmp_path / "own.bin", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "user.jsonl").stat().st_mode & 0o777 == want
    assert (tmp_path / "own.bin").stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["own.bin", "user.jsonl"]  # no probe left


def test_staged_path_gives_the_umask_mode_and_leaves_nothing(tmp_path: Path) -> None:
    """A writer that takes a path (and sets 0644 itself) still ends with the umask's mode."""
    from cdml_edge.fsio import staged_path

    target = tmp_path / "t.zip"
    target.write_bytes(b"old")
    old = os.umask(0o077)
    try:
        with staged_path(target) as staged:
            assert staged.parent.parent == tmp_path and staged.name == "t.zip"
            assert staged.parent.stat().st_mode & 0o777 == 0o700  # nobody else gets in
            atomic_write(staged, b"new", mode=0o644)
        with pytest.raises(RuntimeError), staged_path(target) as staged:
            staged.write_bytes(b"half")
            raise RuntimeError("writer failed")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["t.zip"]
