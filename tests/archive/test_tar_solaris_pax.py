"""Solaris / star extended headers (type ``X``) are pax headers, as every peer reads them.

Solaris ``tar`` (``E`` flag) and ``star`` wrote the pax extended header with type ``X``
before POSIX settled on ``x``; tarfile (``SOLARIS_XHDTYPE``), GNU tar and bsdtar apply its
records to the member after it. Skipping it listed that member under its ustar name (here
the short ``short.txt``, not the long path the archive gives it): a silently wrong member
list. Bytes built here; both engines, plain tar and one-frame tar.zst (with and without a
seekable copy).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases as tc

from cdml_edge.archive import open_archive
from cdml_edge.archive.seekable_cache import SeekableCache

LONG = "solaris/" + "n" * 120 + "/é.txt"


def _solaris_tar() -> bytes:
    records = tc.pax_record(b"path", LONG.encode()) + tc.pax_record(b"mtime", b"1700000123.5")
    return (
        tc.entry(b"first.txt", b"walked by the C core, which hands the X header on\n")
        + tc.pax(records, kind=b"X")
        + tc.entry(b"short.txt", b"member named by an X header\n")
        + tc.entry(b"plain.txt", b"the next member\n")
        + tc.END
    )


def _peers(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}  # type: ignore[union-attr]


def test_tarfile_reads_x_as_a_pax_header() -> None:
    assert _peers(_solaris_tar()) == {
        "first.txt": b"walked by the C core, which hands the X header on\n",
        LONG: b"member named by an X header\n",
        "plain.txt": b"the next member\n",
    }


@pytest.mark.parametrize("form", ["tar", "tar.zst", "tar.zst+copy"])
def test_an_x_header_names_the_member_after_it(engine: str, form: str, tmp_path: Path) -> None:
    data = _solaris_tar()
    want = _peers(data)
    path = tmp_path / f"s.{form.split('+')[0]}"
    path.write_bytes(data if form == "tar" else zstandard.ZstdCompressor().compress(data))
    cache = SeekableCache(tmp_path / "copies") if form.endswith("copy") else None
    with open_archive(path, seekable_cache=cache) as arc:
        assert arc.names() == list(want)
        assert {n: arc.read(n) for n in arc.names()} == want
        assert arc.read_many(list(want)) == list(want.values())
        assert arc.info(LONG).mtime == pytest.approx(1700000123.5)
        assert arc.skipped() == {}
        assert arc.verify() == []


@pytest.mark.skipif(shutil.which("bsdtar") is None, reason="bsdtar (libarchive-tools) missing")
def test_bsdtar_lists_what_we_list(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(_solaris_tar())
    listed = subprocess.run(["bsdtar", "-tf", str(path)], capture_output=True, check=True)
    with open_archive(path) as arc:
        assert listed.stdout.decode().splitlines() == arc.names()
