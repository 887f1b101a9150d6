"""A member-count bomb: very many entries in a few compressed bytes.

A tar.zst of a million empty tar headers is 43 KB on disk (1.5 MB with a million distinct
names) and took about 400 MiB and 3-5 s to open: every entry became a row of the index
before anything was checked. Every archive now holds at most ``max_members`` entries
(files, links, devices; folders are not kept): the walk stops at the first entry past it,
with :class:`TooManyMembersError` naming the archive and the option, whichever walk (the
C core's, the Python one, the plain copy of the seekable cache) meets it. A run of
meta-records (pax, long names) before one entry is bounded the same way.
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases
from helpers.plain_copies import opened, outcome

from cdml_edge.archive import open_archive
from cdml_edge.archive.errors import ArchiveError, CorruptArchiveError, TooManyMembersError
from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.seekable_cache import SeekableCache
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import zst

COUNT = 3000


def _headers(count: int, *, same_name: bool = False, links: bool = False, data: int = 0) -> bytes:
    """A tar stream of ``count`` entries (``data`` random bytes each), end marker included."""
    out = io.BytesIO()
    for i in range(count):
        info = tarfile.TarInfo("a" if same_name else f"m/{i:06d}")
        info.mtime = 0
        if links:
            info.type, info.linkname = tarfile.SYMTYPE, "x"
        info.size = data
        out.write(info.tobuf(format=tarfile.USTAR_FORMAT))
        out.write(tar_cases.pad(os.urandom(data)) if data else b"")
    out.write(b"\0" * 1024)
    return out.getvalue()


def _tar_zst(tmp_path: Path, stream: bytes, level: int = 19) -> Path:
    path = tmp_path / "bomb.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=level).compress(stream))
    return path


@pytest.mark.parametrize("native", [True, False], ids=["c-walk", "python-walk"])
@pytest.mark.parametrize("kind", ["distinct", "same-name", "links"])
def test_a_tar_zst_with_more_entries_than_allowed_is_refused(
    tmp_path: Path, native: bool, kind: str
) -> None:
    if native and plain_copier() is None:
        pytest.skip("the C core with zstd is not built")
    stream = _headers(COUNT, same_name=kind == "same-name", links=kind == "links")
    path = _tar_zst(tmp_path, stream)
    saved = zst.plain_copier
    if not native:
        zst.plain_copier = lambda: None  # type: ignore[assignment]
    try:
        with pytest.raises(TooManyMembersError) as err:
            zst.ZstdTarArchive.open(FileSource(path), max_members=1000)
    finally:
        zst.plain_copier = saved
    assert str(path) in str(err.value)
    assert "max_members=1000" in str(err.value)


def test_within_the_limit_both_walks_agree(tmp_path: Path) -> None:
    path = _tar_zst(tmp_path, _headers(COUNT))
    native, python = opened(path, True), opened(path, False)
    assert native == python
    assert native[0] == "open" and len(native[2]) == COUNT


def test_open_archive_takes_the_limit_and_its_default_refuses_a_million(tmp_path: Path) -> None:
    path = _tar_zst(tmp_path, _headers(COUNT))
    with pytest.raises(TooManyMembersError):
        open_archive(path, max_members=COUNT - 1)
    with open_archive(path, max_members=COUNT) as arc:
        assert len(arc) == COUNT
    with open_archive(path) as arc:  # the default is far above
        assert len(arc) == COUNT
        assert arc.max_members >= 1_000_000


def test_the_limit_travels_with_a_pickled_archive(tmp_path: Path) -> None:
    import pickle

    path = _tar_zst(tmp_path, _headers(10))
    with open_archive(path, max_members=10) as arc:
        again = pickle.loads(pickle.dumps(arc))
        assert again.max_members == 10
        again.close()


@pytest.mark.parametrize("native", [True, False], ids=["c-copy", "python-copy"])
def test_the_seekable_cache_copy_stops_at_the_limit_too(tmp_path: Path, native: bool) -> None:
    if native and plain_copier() is None:
        pytest.skip("the C core with zstd is not built")
    # one frame of members zstd cannot shrink, as stock `tar --zstd` writes of JPEGs: the
    # seekable cache makes a plain copy of it, walking it on the way
    path = _tar_zst(tmp_path, _headers(COUNT, data=4000), level=1)
    found = outcome(path, tmp_path / "copy.tar", native, max_members=1000)
    assert found[:2] == ("error", "TooManyMembersError"), found[:2]
    cache = SeekableCache(tmp_path / "cache")
    with pytest.raises(TooManyMembersError):
        open_archive(path, seekable_cache=cache, max_members=1000)


def test_a_plain_tar_with_more_entries_than_allowed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar"
    path.write_bytes(_headers(COUNT))
    with pytest.raises(TooManyMembersError):
        open_archive(path, max_members=1000)


@pytest.mark.parametrize("native", [True, False], ids=["c-index", "python-index"])
def test_a_zip_declaring_more_entries_than_allowed_is_refused_at_open(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(COUNT):
            zf.writestr(f"m/{i:06d}", b"")
    with pytest.raises(TooManyMembersError) as err:
        open_archive(path, max_members=1000)
    assert "3,000 entries" in str(err.value)
    with open_archive(path, max_members=COUNT) as arc:
        assert len(arc) == COUNT


def test_a_run_of_pax_records_before_one_entry_is_bounded(tmp_path: Path) -> None:
    record = tar_cases.pax(tar_cases.pax_record(b"comment", b"x" * 400))
    stream = record * 5000 + tar_cases.entry(b"a", b"1") + b"\0" * 1024
    path = _tar_zst(tmp_path, stream)
    for native in (True, False):
        found = opened(path, native)
        assert found[:2] == ("error", "CorruptArchiveError"), found[:2]
        assert "meta-records" in found[2]
    with pytest.raises(CorruptArchiveError):
        open_archive(path)
    assert issubclass(TooManyMembersError, ArchiveError)
