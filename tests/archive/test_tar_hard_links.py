"""Tar hard links are members: the bytes of the file they link to, as tar -x makes them.

GNU tar and bsdtar store the second name of a hard-linked file (``cp -al`` snapshots,
``rsync --link-dest`` backups, deduplicated datasets) as a link header without data.
They were listed in ``skipped()`` and not served: a dataset packed from such a folder
silently lost those files. Python's tarfile serves the target's bytes for them
(``extractfile``), and ``tar -x`` makes them the same file; so do we now, on every path
(plain tar, tar.zst walked by the C core or in Python, the seekable cache's copies). A link
whose target no file before it has stays skipped, saying so.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases as tc
from helpers.plain_copies import opened

from cdml_edge.archive import open_archive
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.tar import zst


def _peer(data: bytes) -> dict[str, bytes]:
    """What Python's tarfile serves for every file and hard link of ``data``."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf.getmembers():
            if m.isfile() or m.islnk():
                fh = tf.extractfile(m)
                assert fh is not None
                out[m.name.removeprefix("./")] = fh.read()
    return out


def _tree(root: Path) -> None:
    (root / "img").mkdir(parents=True)
    (root / "img" / "a.bin").write_bytes(os.urandom(3000))
    (root / "img" / "b.bin").write_bytes(b"bee" * 100)
    os.link(root / "img" / "a.bin", root / "img" / "a-again.bin")
    os.link(root / "img" / "b.bin", root / "b-top.bin")


@pytest.fixture
def gnu_tar(tmp_path: Path) -> bytes:
    _tree(tmp_path / "tree")
    out = subprocess.run(
        ["tar", "--sort=name", "-cf", "-", "-C", str(tmp_path / "tree"), "."],
        check=True,
        capture_output=True,
    ).stdout
    assert b"a-again.bin" in out
    return out


def test_a_gnu_tar_of_hard_links_serves_every_name(gnu_tar: bytes) -> None:
    peer = _peer(gnu_tar)
    assert len(peer) == 4 and peer["img/a-again.bin"] == peer["img/a.bin"]
    with open_archive(gnu_tar) as arc:
        assert sorted(arc.names()) == sorted(peer)
        assert {n: arc.read(n) for n in arc.names()} == peer
        assert arc.read_many(["b-top.bin", "img/a-again.bin"]) == [
            peer["b-top.bin"],
            peer["img/a-again.bin"],
        ]
        assert arc.info("img/a-again.bin").size == 3000
        assert arc.skipped() == {}


@pytest.mark.parametrize("cache", [False, True], ids=["stream", "seekable-cache"])
def test_a_stock_tar_zst_of_hard_links_serves_every_name(
    gnu_tar: bytes, tmp_path: Path, cache: bool
) -> None:
    path = tmp_path / "links.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(gnu_tar))
    peer = _peer(gnu_tar)
    setting = SeekableCache(tmp_path / "cache") if cache else None
    for _ in range(2):  # made, then reused
        with open_archive(path, seekable_cache=setting) as arc:
            assert {n: arc.read(n) for n in arc.names()} == peer
            names = sorted(arc.names())  # a link and its target in one batch, twice
            assert arc.read_many(names + names) == [peer[n] for n in names + names]
            assert arc.skipped() == {}
            arc.verify()


def test_the_c_walk_and_the_python_walk_agree_on_links(gnu_tar: bytes, tmp_path: Path) -> None:
    if plain_copier() is None:
        pytest.skip("the C core with zstd is not built")
    path = tmp_path / "links.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(gnu_tar))
    native, python = opened(path, True), opened(path, False)
    assert native == python
    assert sorted(native[2]) == sorted(_peer(gnu_tar))


def test_a_link_serves_the_file_of_that_name_before_it() -> None:
    data = (
        tc.entry(b"a.txt", b"first\n")
        + tc.header(b"old.txt", 0, b"1", link=b"./a.txt")
        + tc.entry(b"a.txt", b"second, longer\n")
        + tc.header(b"new.txt", 0, b"1", link=b"a.txt")
        + tc.header(b"chain.txt", 0, b"1", link=b"old.txt")
        + tc.END
    )
    peer = _peer(data)
    with open_archive(data) as arc:
        got = {n: arc.read(n) for n in arc.names()}
    assert got == {
        "a.txt": b"second, longer\n",
        "old.txt": b"first\n",
        "new.txt": b"second, longer\n",
        "chain.txt": b"first\n",
    }
    assert got["old.txt"] == peer["old.txt"]


def test_a_link_to_no_file_before_it_stays_skipped_and_says_so() -> None:
    data = (
        tc.header(b"early.txt", 0, b"1", link=b"a.txt")
        + tc.entry(b"a.txt", b"alpha\n")
        + tc.header(b"nowhere.txt", 0, b"1", link=b"missing.txt")
        + tc.END
    )
    with open_archive(data) as arc:
        assert arc.names() == ["a.txt"]
        skipped = arc.skipped()
        assert skipped["early.txt"].startswith("hard link to 'a.txt'")
        assert "no file of that name before it" in skipped["nowhere.txt"]


def test_a_seekable_copy_made_before_links_were_served_is_not_reused(
    gnu_tar: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy's member index written by the release before this one lacks the links."""
    from cdml_edge.archive import seekable_cache
    from cdml_edge.archive.tar import members

    path = tmp_path / "links.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(gnu_tar))
    cache = SeekableCache(tmp_path / "cache")
    with monkeypatch.context() as old:  # the release before: links skipped, copy format 1
        old.setattr(seekable_cache, "COPY_FORMAT", 1, raising=False)
        old.setattr(members, "served_links", lambda ms, sk: [m for m in ms if m.link is None])
        old.setattr(zst.ZstdTarArchive, "_has_links", lambda self: False)
        with open_archive(path, seekable_cache=cache) as arc:
            assert arc.seekable_copy is not None  # type: ignore[attr-defined]
            assert len(arc.names()) == 2  # the two links left out
    with open_archive(path, seekable_cache=cache) as arc:
        assert sorted(arc.names()) == sorted(_peer(gnu_tar))
